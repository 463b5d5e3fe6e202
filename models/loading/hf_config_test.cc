#include "models/loading/hf_config.h"

#include <gtest/gtest.h>

#include "platform/test_util/fake_file_system.h"

namespace castserve::models {
namespace {

constexpr char kConfig[] = R"({
  "model_type": "bert", "hidden_size": 32, "layer_norm_eps": 1e-12,
  "tie_word_embeddings": true, "rope_scaling": null,
  "architectures": ["BertModel"], "eos_token_id": [1, 2],
  "vision_config": {"hidden_size": 16, "hidden_act": "gelu_pytorch_tanh"},
  "ratio": 2.5
})";

TEST(HfConfigTest, ReadsTypedValues) {
  absl::StatusOr<HfConfig> config = HfConfig::Parse(kConfig, "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "bert");
  EXPECT_EQ(*config->GetInt("hidden_size"), 32);
  EXPECT_DOUBLE_EQ(*config->GetDouble("layer_norm_eps"), 1e-12);
  EXPECT_TRUE(*config->GetBool("tie_word_embeddings"));
  EXPECT_EQ(*config->GetStringList("architectures"),
            std::vector<std::string>{"BertModel"});
  EXPECT_EQ(*config->GetIntList("eos_token_id"), (std::vector<int64_t>{1, 2}));
}

TEST(HfConfigTest, NullCountsAsAbsentAndDefaultsApply) {
  HfConfig config = *HfConfig::Parse(kConfig, "config.json");
  EXPECT_FALSE(config.Has("rope_scaling"));
  EXPECT_EQ(config.GetObject("rope_scaling").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*config.GetInt("num_layers", 7), 7);
  EXPECT_EQ(*config.GetString("hidden_act", "gelu"), "gelu");
  EXPECT_DOUBLE_EQ(*config.GetDouble("ratio", 1.0), 2.5);
}

TEST(HfConfigTest, NestedObjectKeepsDocumentAliveAndNamesItself) {
  absl::StatusOr<HfConfig> vision;
  {
    HfConfig config = *HfConfig::Parse(kConfig, "config.json");
    vision = config.GetObject("vision_config");
  }
  ASSERT_TRUE(vision.ok()) << vision.status();
  EXPECT_EQ(*vision->GetInt("hidden_size"), 16);
  EXPECT_EQ(*vision->GetString("hidden_act"), "gelu_pytorch_tanh");
  absl::Status missing = vision->GetInt("num_layers").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("config.json:vision_config"),
            std::string::npos);
  EXPECT_NE(missing.message().find("num_layers"), std::string::npos);
}

TEST(HfConfigTest, WrongTypesAreInvalidArgument) {
  HfConfig config = *HfConfig::Parse(kConfig, "config.json");
  EXPECT_EQ(config.GetInt("ratio").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.GetInt("ratio", 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.GetString("hidden_size").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.GetBool("model_type").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.GetIntList("architectures").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfConfigTest, SizesAreRangeChecked) {
  HfConfig config = *HfConfig::Parse(
      R"({"hidden_size": 65536, "intermediate_size": 1000000000000,
          "vocab_size": 0, "num_hidden_layers": -3, "head_dim": 2.5})",
      "config.json");
  EXPECT_EQ(*config.GetSize("hidden_size"), 65536);
  absl::Status huge = config.GetSize("intermediate_size").status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(huge.message(),
            "config.json: intermediate_size is 1000000000000, outside "
            "[1, 1048576]");
  EXPECT_EQ(config.GetSize("vocab_size").status().message(),
            "config.json: vocab_size is 0, outside [1, 16777216]");
  EXPECT_EQ(config.GetSize("num_hidden_layers", 2).status().message(),
            "config.json: num_hidden_layers is -3, outside [1, 1024]");
  EXPECT_EQ(config.GetSize("head_dim").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Absent: NotFound, or the caller's default.
  EXPECT_EQ(config.GetSize("num_attention_heads").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*config.GetSize("sliding_window", 0), 0);
  // Every key read as a size needs a limit.
  EXPECT_EQ(config.GetSize("ratio").status().code(),
            absl::StatusCode::kInternal);
}

TEST(HfConfigTest, RejectsNonObjectsAndBadJson) {
  EXPECT_EQ(HfConfig::Parse("[1]", "c.json").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status bad = HfConfig::Parse("{\"a\": }", "c.json").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("c.json"), std::string::npos);
  EXPECT_EQ(HfConfig::Load("/nonexistent/config.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(HfConfigTest, LoadsThroughTheFileSystem) {
  platform::FakeFileSystem file_system;
  file_system.AddFile("/model/config.json", kConfig);
  absl::StatusOr<HfConfig> config =
      HfConfig::Load("/model/config.json", &file_system);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "bert");
  EXPECT_EQ(config->label(), "/model/config.json");
}

TEST(HfConfigTest, UnreadableOrOversizedFileIsAPreciseError) {
  platform::FakeFileSystem file_system;
  file_system.AddFile("/model/config.json", kConfig);
  file_system.FailOn("/model/config.json", absl::StatusCode::kPermissionDenied,
                     "cannot open: Permission denied");
  absl::Status denied =
      HfConfig::Load("/model/config.json", &file_system).status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(denied.message(),
            "/model/config.json: cannot open: Permission denied");
  file_system.AddFile("/big/config.json",
                      std::string(kMaxHfConfigBytes + 1, ' '));
  absl::Status big = HfConfig::Load("/big/config.json", &file_system).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(big.message().find("above the limit"), std::string::npos);
}

}  // namespace
}  // namespace castserve::models
