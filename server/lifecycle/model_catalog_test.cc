#include "server/lifecycle/model_catalog.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "gtest/gtest.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

class ModelCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void WriteFile(const fs::path& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  const ModelCatalog& catalog() {
    repository_ = *ModelRepository::Open(root_.string());
    catalog_ = std::make_unique<ModelCatalog>(repository_.get());
    return *catalog_;
  }

  fs::path root_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<ModelCatalog> catalog_;
};

TEST(ModelCatalogNameTest, RefusesNamesThatCouldLeaveTheRepository) {
  EXPECT_TRUE(ModelCatalog::ValidateName("bert-base_1").ok());
  for (const std::string& name :
       {std::string(), std::string("a/b"), std::string("a\\b"),
        std::string(".."), std::string(".hidden"), std::string("x..y"),
        std::string("a\0b", 3), std::string(256, 'n')}) {
    EXPECT_EQ(ModelCatalog::ValidateName(name).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

TEST(ModelCatalogVersionTest, ServesVersionOneOnly) {
  EXPECT_TRUE(CheckModelVersion("m", "").ok());
  EXPECT_TRUE(CheckModelVersion("m", "1").ok());
  absl::Status two = CheckModelVersion("m", "2");
  EXPECT_EQ(two.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(two.message(), "model m has no version 2 (only version 1)");
}

TEST_F(ModelCatalogTest, FindsModelDirectoriesAndTheirConfigs) {
  WriteFile("m/config.pbtxt", "load_policy: LOAD_POLICY_FIRST_REQUEST");
  const ModelCatalog& models = catalog();
  EXPECT_TRUE(models.Contains("m"));
  EXPECT_FALSE(models.Contains("absent"));
  EXPECT_EQ(models.DirectoryOf("m"), (root_ / "m").string());
  absl::StatusOr<inference::ModelConfig> config =
      models.ConfigFor("m", std::nullopt);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "m");
  EXPECT_TRUE(ModelCatalog::LoadsOnFirstRequest(config));
  EXPECT_EQ(ModelCatalog::NotLoadedStatus("m", config).reason,
            "not loaded; loads on its first request");
}

TEST_F(ModelCatalogTest, AnOverrideIsCheckedLikeAConfigFile) {
  WriteFile("m/config.pbtxt", "");
  const ModelCatalog& models = catalog();
  inference::ModelConfig unnamed;
  absl::StatusOr<inference::ModelConfig> named = models.ConfigFor("m", unnamed);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->name(), "m");
  inference::ModelConfig other;
  other.set_name("other");
  EXPECT_EQ(models.ConfigFor("m", other).status().code(),
            absl::StatusCode::kInvalidArgument);
  inference::ModelConfig invalid;
  invalid.set_max_batch_size(-1);
  EXPECT_EQ(models.ConfigFor("m", invalid).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelCatalogTest, ABadConfigIsTheReasonTheModelIsNotLoaded) {
  WriteFile("broken/config.pbtxt", "max_batch_size: many");
  const ModelCatalog& models = catalog();
  absl::StatusOr<inference::ModelConfig> config =
      models.ConfigFor("broken", std::nullopt);
  EXPECT_FALSE(config.ok());
  EXPECT_FALSE(ModelCatalog::LoadsOnFirstRequest(config));
  EXPECT_EQ(ModelCatalog::NotLoadedStatus("broken", config).reason,
            config.status().message());
}

}  // namespace
}  // namespace castserve
