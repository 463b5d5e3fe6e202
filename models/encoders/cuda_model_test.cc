// Models on cuda:0 (issue 15's GPU tests): a fixture under layerwise casting
// matches its reference within the CPU tolerances, and with transient copies
// only the running module holds compute copies on the GPU too. Reports
// SKIPPED ("no CUDA device") without a device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "casting/casting_policy.h"
#include "casting/codec/storage_format.h"
#include "casting/device/device_probe.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

constexpr char kBert[] = "models/testdata/bert";

std::map<std::string, at::Tensor> ReadReference() {
  auto tensors =
      test_util::ReadSafetensors(std::string(kBert) + "/reference.safetensors");
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *tensors : std::map<std::string, at::Tensor>{};
}

NamedTensors Inputs(const std::map<std::string, at::Tensor>& reference) {
  NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    inputs[name] = reference.at(std::string("input.") + name);
  }
  return inputs;
}

WeightPolicyOptions CastOnCuda(const std::string& format, bool prefetch) {
  const casting::StorageFormat storage = *casting::StorageFormat::Parse(format);
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = storage.element;
  policy.scaling = storage.scaling;
  policy.compute_dtype = casting::ElementType::kF32;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  options.prefetch = prefetch;
  options.device = casting::Device::Cuda(0);
  return options;
}

TEST(CudaModelTest, LayerwiseCastingOnCudaMatchesTheRoundTripReference) {
  if (casting::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const auto reference = ReadReference();
  for (const std::string& format : test_util::CastFormatNames()) {
    for (bool prefetch : {false, true}) {
      for (bool on_host : {false, true}) {
        WeightPolicyOptions options = CastOnCuda(format, prefetch);
        options.storage_on_host = on_host;
        absl::StatusOr<std::unique_ptr<Model>> model =
            LoadHfModel(kBert, options);
        ASSERT_TRUE(model.ok()) << model.status();
        EXPECT_EQ((*model)->device(), casting::Device::Cuda(0));
        absl::StatusOr<NamedTensors> outputs =
            (*model)->Forward(Inputs(reference));
        ASSERT_TRUE(outputs.ok()) << outputs.status();
        for (const char* name : {"last_hidden_state", "pooler_output"}) {
          const at::Tensor& output = outputs->at(name);
          EXPECT_TRUE(output.is_cpu()) << "outputs come back to the host";
          EXPECT_LT(test_util::RelativeMaxError(
                        output, reference.at("roundtrip." + format +
                                             ".output." + name)),
                    1e-4)
              << format << " " << name << " prefetch=" << prefetch
              << " host storage=" << on_host;
        }
      }
    }
  }
}

// Modules of `root` holding transient compute copies right now.
int ModulesWithTransientCopies(Module& root) {
  int modules = 0;
  root.Visit([&modules](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      if (weight->footprint().transient_compute_bytes() > 0) {
        ++modules;
        return;
      }
    }
  });
  return modules;
}

TEST(CudaModelTest, OnlyTheRunningModuleHoldsComputeCopies) {
  if (casting::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const auto reference = ReadReference();
  for (bool prefetch : {false, true}) {
    absl::StatusOr<std::unique_ptr<Model>> model =
        LoadHfModel(kBert, CastOnCuda("F8_E4M3FN:per_row", prefetch));
    ASSERT_TRUE(model.ok()) << model.status();
    Module& root = (*model)->root();
    std::vector<int> holding;
    root.Visit([&root, &holding](Module& module) {
      if (module.weights().empty()) return;
      // Runs after the casting hooks' pre-hook: this module holds its copies.
      module.AddPreForwardHook(
          [&root, &holding](const Module&, ForwardContext&) {
            holding.push_back(ModulesWithTransientCopies(root));
          });
    });
    ASSERT_TRUE((*model)->Forward(Inputs(reference)).ok());
    ASSERT_FALSE(holding.empty());
    for (int modules : holding) {
      EXPECT_LE(modules, prefetch ? 2 : 1) << "prefetch=" << prefetch;
    }
    EXPECT_EQ(ModulesWithTransientCopies(root), 0) << "after the forward";
  }
}

}  // namespace
}  // namespace castserve::models
