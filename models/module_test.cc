#include "models/module.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "casting/formats/safetensors_reader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

// A module whose forward only records that it ran.
class Recorder : public Module {
 public:
  Recorder(std::string name, std::vector<std::string>* log)
      : Module(std::move(name), "Recorder"), log_(log) {}
  void Forward(ForwardContext& context) const {
    ModuleCall call(*this, context);
    log_->push_back("forward " + name());
    for (Module* child : children()) {
      static_cast<Recorder*>(child)->Forward(context);
    }
  }

 private:
  std::vector<std::string>* log_;
};

ForwardHook Log(std::vector<std::string>* log, std::string tag) {
  return [log, tag](const Module& module, ForwardContext&) {
    log->push_back(tag + " " + module.name());
  };
}

TEST(ModuleTest, VisitsTreeParentsFirstInRegistrationOrder) {
  std::vector<std::string> log;
  Recorder root("", &log);
  Module* a = root.AddChild(std::make_unique<Recorder>("a", &log));
  a->AddChild(std::make_unique<Recorder>("a.0", &log));
  root.AddChild(std::make_unique<Recorder>("b", &log));
  std::vector<std::string> names;
  root.Visit([&](Module& module) { names.push_back(module.name()); });
  EXPECT_EQ(names, (std::vector<std::string>{"", "a", "a.0", "b"}));
  EXPECT_EQ(root.children().size(), 2u);
}

TEST(ModuleTest, PreHooksRunInOrderPostHooksInReverse) {
  std::vector<std::string> log;
  Recorder module("m", &log);
  module.AddPreForwardHook(Log(&log, "pre1"));
  module.AddPreForwardHook(Log(&log, "pre2"));
  module.AddPostForwardHook(Log(&log, "post1"));
  module.AddPostForwardHook(Log(&log, "post2"));
  ForwardContext context;
  module.Forward(context);
  EXPECT_EQ(log, (std::vector<std::string>{"pre1 m", "pre2 m", "forward m",
                                           "post2 m", "post1 m"}));
}

TEST(ModuleTest, HooksNestAroundChildren) {
  std::vector<std::string> log;
  Recorder root("root", &log);
  Module* child = root.AddChild(std::make_unique<Recorder>("child", &log));
  root.Visit([&](Module& module) {
    module.AddPreForwardHook(Log(&log, "pre"));
    module.AddPostForwardHook(Log(&log, "post"));
  });
  (void)child;
  ForwardContext context;
  root.Forward(context);
  EXPECT_EQ(log, (std::vector<std::string>{"pre root", "forward root",
                                           "pre child", "forward child",
                                           "post child", "post root"}));
}

TEST(ModuleTest, RemovedHooksNoLongerRun) {
  std::vector<std::string> log;
  Recorder module("m", &log);
  const int pre = module.AddPreForwardHook(Log(&log, "pre"));
  const int post = module.AddPostForwardHook(Log(&log, "post"));
  EXPECT_TRUE(module.RemoveHook(pre));
  EXPECT_TRUE(module.RemoveHook(post));
  EXPECT_FALSE(module.RemoveHook(pre));
  ForwardContext context;
  module.Forward(context);
  EXPECT_EQ(log, std::vector<std::string>{"forward m"});
}

TEST(ModuleTest, PostHooksRunWhenForwardThrows) {
  std::vector<std::string> log;
  Recorder module("m", &log);
  module.AddPostForwardHook(Log(&log, "post"));
  ForwardContext context;
  EXPECT_THROW(
      {
        ModuleCall call(module, context);
        TORCH_CHECK(false, "boom");
      },
      c10::Error);
  EXPECT_EQ(log, std::vector<std::string>{"post m"});
}

class ModuleWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = test_util::MakeScratchDir("module") + "/model.safetensors";
    // Several pages, so that truncating the file unmaps the data.
    weight_ = at::randn({2048, 8});
    ASSERT_TRUE(
        test_util::WriteSafetensors(path_, {{"fc.weight", weight_}}).ok());
    checkpoint_ = *casting::OpenSafetensors(path_);
  }
  std::unique_ptr<casting::Weight> MakeWeight(casting::ComputeCopyPolicy copy) {
    casting::WeightOptions options;
    options.residency = casting::Residency::kMapped;
    options.compute_copy = copy;
    return *casting::Weight::Create(checkpoint_, "fc.weight", options);
  }

  std::string path_;
  at::Tensor weight_;
  std::shared_ptr<const casting::Checkpoint> checkpoint_;
};

TEST_F(ModuleWeightsTest, ParamAcquiresOnceAndHoldsUntilRelease) {
  Module module("fc", "Linear");
  module.AddWeight("weight",
                   MakeWeight(casting::ComputeCopyPolicy::kTransient));
  ForwardContext context;
  EXPECT_EQ(context.modules_holding(), 0);
  const at::Tensor& first = module.Param(context, "weight");
  EXPECT_TRUE(at::equal(first, weight_));
  EXPECT_EQ(context.modules_holding(), 1);
  module.Param(context, "weight");
  EXPECT_EQ(module.weight("weight")->compute_builds(), 1);
  EXPECT_EQ(module.weight("weight")->footprint().transient_compute_bytes(),
            2048 * 8 * 4);
  context.Release(&module);
  EXPECT_EQ(context.modules_holding(), 0);
  EXPECT_EQ(module.weight("weight")->footprint().transient_compute_bytes(), 0);
}

TEST_F(ModuleWeightsTest, OptionalParamAndMissingWeight) {
  Module module("fc", "Linear");
  module.AddWeight("weight", MakeWeight(casting::ComputeCopyPolicy::kCached));
  ForwardContext context;
  EXPECT_FALSE(module.OptionalParam(context, "bias").defined());
  EXPECT_THROW(module.Param(context, "bias"), c10::Error);
}

TEST_F(ModuleWeightsTest, TruncatedFileThrowsWeightUnavailableWithDataLoss) {
  Module module("fc", "Linear");
  module.AddWeight("weight", MakeWeight(casting::ComputeCopyPolicy::kCached));
  ASSERT_EQ(truncate(path_.c_str(), 0), 0);
  ForwardContext context;
  try {
    module.Param(context, "weight");
    FAIL() << "expected WeightUnavailableError";
  } catch (const WeightUnavailableError& error) {
    EXPECT_EQ(error.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(std::string(error.what()).find("fc.weight"), std::string::npos);
  }
}

}  // namespace
}  // namespace castserve::models
