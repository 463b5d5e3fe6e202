#include "models/module_profiler.h"

#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

constexpr char kBert[] = "models/testdata/bert";

NamedTensors BertInputs() {
  auto reference =
      test_util::ReadSafetensors(std::string(kBert) + "/reference.safetensors");
  EXPECT_TRUE(reference.ok()) << reference.status();
  NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    inputs[name] = reference->at(std::string("input.") + name);
  }
  return inputs;
}

class ModuleProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
    auto model = LoadHfModel(kBert, {});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  std::unique_ptr<Model> model_;
};

TEST_F(ModuleProfilerTest, TimesAndMeasuresEveryModuleOfAForward) {
  std::unique_ptr<ModuleProfiler> profiler =
      ModuleProfiler::Attach(model_->root());
  const NamedTensors inputs = BertInputs();
  ASSERT_TRUE(model_->Forward(inputs).ok());
  ASSERT_TRUE(model_->Forward(inputs).ok());

  std::map<std::string, int64_t> out_features_by_name;
  model_->root().Visit([&](Module& module) {
    if (module.kind() == "Linear") {
      out_features_by_name[module.name()] = module.weight("weight")->shape()[0];
    }
  });
  const std::map<std::string, ModuleProfile> profiles = profiler->profiles();
  const int64_t batch = inputs.at("input_ids").size(0);
  const int64_t tokens = inputs.at("input_ids").size(1);
  int linears = 0;
  for (const auto& [name, profile] : profiles) {
    EXPECT_EQ(profile.calls, 2) << name;
    EXPECT_GT(profile.total_time, absl::ZeroDuration()) << name;
    if (profile.kind != "Linear") continue;
    ++linears;
    // A Linear allocates at least its f32 output, [rows, out], where the
    // pooler sees one token per sequence and the others every token.
    const int64_t out_features = out_features_by_name.at(name);
    const int64_t rows =
        name.find("pooler") == std::string::npos ? batch * tokens : batch;
    const int64_t min_bytes = rows * out_features * 4;
    EXPECT_GE(profile.max_peak_increase_bytes, min_bytes) << name;
  }
  EXPECT_GT(linears, 0);
}

TEST_F(ModuleProfilerTest, RemovedProfilerRecordsNothingMore) {
  std::unique_ptr<ModuleProfiler> profiler =
      ModuleProfiler::Attach(model_->root());
  ASSERT_TRUE(model_->Forward(BertInputs()).ok());
  const auto before = profiler->profiles();
  profiler->Remove();
  ASSERT_TRUE(model_->Forward(BertInputs()).ok());
  const auto after = profiler->profiles();
  ASSERT_FALSE(before.empty());
  for (const auto& [name, profile] : after) {
    EXPECT_EQ(profile.calls, before.at(name).calls) << name;
  }
}

}  // namespace
}  // namespace castserve::models
