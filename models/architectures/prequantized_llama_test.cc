// Pre-quantized fp8 Llama folders (models/testdata/prequantized, written by
// tools/gen_prequantized_fixtures.py) against transformers 5's own
// dequantized load of the same folders, and refusals of broken ones.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "casting/casting_policy.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "casting/memory/footprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/kernels/storage_product.h"
#include "models/loading/model_loader.h"
#include "models/module.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

constexpr char kFixtures[] = "models/testdata/prequantized/";

casting::Footprint FootprintOf(Model& model) {
  casting::Footprint total;
  model.root().Visit([&](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      total += weight->footprint();
    }
  });
  return total;
}

class PrequantizedLlamaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = kFixtures + GetParam();
    auto reference =
        test_util::ReadSafetensors(folder_ + "/reference.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
    inputs_ = {{"input_ids", reference_.at("input.input_ids")},
               {"attention_mask", reference_.at("input.attention_mask")}};
  }

  at::Tensor Logits(const WeightPolicyOptions& options,
                    std::unique_ptr<Model>* keep = nullptr) {
    auto model = LoadHfModel(folder_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return at::zeros({1});
    auto outputs = (*model)->Forward(inputs_);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    at::Tensor logits = outputs.ok() ? outputs->at("logits") : at::zeros({1});
    if (keep != nullptr) *keep = *std::move(model);
    return logits;
  }

  // An fp8 layerwise casting policy, transient copies, prefetch: the
  // pre-quantized linears keep their file's format under it (not per_row).
  // The plain f32 embeddings and head, which the casting policy would
  // round to fp8 like any weight (a lossy choice of the config, not of the
  // checkpoint), are skipped so that the outputs stay comparable.
  static WeightPolicyOptions LayerwiseFp8(casting::ElementType compute) {
    casting::CastingPolicy::Options policy;
    policy.storage_dtype = casting::ElementType::kF8E4M3FN;
    policy.scaling = casting::Scaling::kPerRow;
    policy.compute_dtype = compute;
    policy.skip_modules_pattern.push_back("embed_tokens");
    policy.skip_modules_pattern.push_back("lm_head");
    WeightPolicyOptions options;
    options.compute_copy = casting::ComputeCopyPolicy::kTransient;
    options.prefetch = true;
    options.casting = *casting::CastingPolicy::Create(policy);
    return options;
  }

  // The first 4 tokens of the first sequence: few enough rows for every
  // product to read storage.
  NamedTensors FewRows() const {
    return {
        {"input_ids", inputs_.at("input_ids").slice(0, 0, 1).slice(1, 0, 4)},
        {"attention_mask",
         inputs_.at("attention_mask").slice(0, 0, 1).slice(1, 0, 4)}};
  }

  // The logits over real (unpadded) tokens.
  at::Tensor Real(const at::Tensor& logits) const {
    return logits.index({reference_.at("input.attention_mask").to(at::kBool)});
  }

  std::string folder_;
  Tensors reference_;
  NamedTensors inputs_;
};

TEST_P(PrequantizedLlamaTest, F32MatchesTransformersDequantizedLoad) {
  const at::Tensor& expected = reference_.at("output.logits");
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  WeightPolicyOptions streamed = mapped;
  streamed.compute_copy = casting::ComputeCopyPolicy::kTransient;
  streamed.prefetch = true;
  WeightPolicyOptions eager;
  eager.eager = true;
  const std::map<std::string, WeightPolicyOptions> policies = {
      {"resident", {}},
      {"mapped", mapped},
      {"mapped transient prefetch", streamed},
      {"eager", eager},
      {"fp8 layerwise casting", LayerwiseFp8(casting::ElementType::kF32)}};
  for (const auto& [name, options] : policies) {
    const double error =
        test_util::RelativeMaxError(Real(Logits(options)), Real(expected));
    EXPECT_LE(error, 1e-4) << name;
    std::cout << GetParam() << " f32 " << name << ": max rel error " << error
              << "\n";
  }
}

// bf16 compute rounds every weight and activation to 8 significant bits
// (relative step 2^-8 = 3.9e-3); through two decoder layers and the head the
// logits' largest error stays within a few steps of their scale. 2e-2 is
// five steps: loose enough for rounding, far below what a wrong scale gives
// (unscaled fp8 weights are off by factors of 10-1000).
TEST_P(PrequantizedLlamaTest, Bf16ComputeIsWithinBf16Rounding) {
  const at::Tensor expected = Real(reference_.at("output.logits"));
  WeightPolicyOptions bf16;
  bf16.compute_dtype = casting::ElementType::kBF16;
  for (const auto& [name, options] : std::map<std::string, WeightPolicyOptions>{
           {"resident", bf16},
           {"fp8 layerwise casting",
            LayerwiseFp8(casting::ElementType::kBF16)}}) {
    const at::Tensor logits = Real(Logits(options));
    const double error = test_util::RelativeMaxError(logits, expected);
    const double cosine = test_util::CosineSimilarity(logits, expected);
    EXPECT_LE(error, 2e-2) << name;
    EXPECT_GE(cosine, 0.9999) << name;
    std::cout << GetParam() << " bf16 " << name << ": max rel error " << error
              << ", cosine " << cosine << "\n";
  }
}

TEST_P(PrequantizedLlamaTest, StorageIsTheFilesBytesAndTheModelSaysSo) {
  std::unique_ptr<Model> model;
  WeightPolicyOptions eager;
  eager.eager = true;
  Logits(eager, &model);
  ASSERT_NE(model, nullptr);
  auto checkpoint = OpenHfCheckpoint(folder_);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int64_t fp8_bytes = 0, scale_elements = 0;
  for (const casting::TensorEntry& entry : (*checkpoint)->tensors()) {
    if (entry.dtype == casting::DType::kF8E4M3) fp8_bytes += entry.size_bytes;
    if (absl::StrContains(entry.name, "_scale")) {
      scale_elements += entry.numel();
    }
  }
  ASSERT_GT(fp8_bytes, 0);
  const casting::Footprint footprint = FootprintOf(*model);
  int64_t fp8_resident = 0;
  for (const auto& [format, bytes] : footprint.resident_bytes_by_format()) {
    if (absl::StartsWith(format, "f8_e4m3fn")) fp8_resident += bytes;
  }
  // The fp8 bytes as in the file, plus the scales as f32.
  EXPECT_EQ(fp8_resident, fp8_bytes + 4 * scale_elements)
      << footprint.ToString();
  EXPECT_THAT(model->storage_note(),
              HasSubstr("14 fp8 weights kept as stored"));
  EXPECT_EQ(absl::StrContains(model->storage_note(), "not applied"),
            GetParam() != "ct_tensor")
      << model->storage_note();
}

// A forward of few rows reads the pre-quantized weights in place
// (models/kernels/storage_product.h) with their scales — per tensor, row or
// block — and gives what decoding a compute copy gives.
TEST_P(PrequantizedLlamaTest, FewRowsReadTheStoredFp8WithItsScales) {
  const NamedTensors few = FewRows();
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  mapped.compute_copy = casting::ComputeCopyPolicy::kTransient;
  WeightPolicyOptions resident;
  resident.compute_copy = casting::ComputeCopyPolicy::kTransient;
  const int64_t default_rows = StorageProductMaxRows();
  ASSERT_GE(default_rows, 4);
  for (const auto& [name, options] : std::map<std::string, WeightPolicyOptions>{
           {"mapped", mapped}, {"resident", resident}}) {
    auto logits_with_max_rows = [&](int64_t max_rows, int64_t* reads) {
      SetStorageProductMaxRows(max_rows);
      auto model = LoadHfModel(folder_, options);
      EXPECT_TRUE(model.ok()) << model.status();
      if (!model.ok()) return at::zeros({1});
      auto outputs = (*model)->Forward(few);
      EXPECT_TRUE(outputs.ok()) << outputs.status();
      *reads = 0;
      (*model)->root().Visit([&](Module& module) {
        for (const auto& [weight_name, weight] : module.weights()) {
          *reads += weight->activity().storage_reads;
        }
      });
      return outputs.ok() ? outputs->at("logits") : at::zeros({1});
    };
    int64_t copy_reads = 0, storage_reads = 0;
    const at::Tensor copied = logits_with_max_rows(0, &copy_reads);
    const at::Tensor stored =
        logits_with_max_rows(default_rows, &storage_reads);
    SetStorageProductMaxRows(default_rows);
    EXPECT_EQ(copy_reads, 0) << name;
    EXPECT_GE(storage_reads, 14) << name << ": the fp8 projections";
    EXPECT_LE(test_util::RelativeMaxError(stored, copied), 1e-4) << name;
  }
}

// Memory tiers: cool, the resident fp8 storage (the file's bytes) is read
// from the mapping with its scales until a promotion makes it resident
// again; the logits are bitwise those of the hot model throughout, for a
// prefill (compute copies decoded from the mapping) and for few rows (the
// stored fp8 read in place).
TEST_P(PrequantizedLlamaTest, ACoolModelServesItsFp8FromTheMapping) {
  const NamedTensors few = FewRows();
  WeightPolicyOptions resident;
  resident.compute_copy = casting::ComputeCopyPolicy::kTransient;
  auto model = LoadHfModel(folder_, resident);
  ASSERT_TRUE(model.ok()) << model.status();
  auto serving_mapped = [&] {
    int count = 0;
    (*model)->root().Visit([&](Module& module) {
      for (const auto& [name, weight] : module.weights()) {
        count += weight->serving_mapped() ? 1 : 0;
      }
    });
    return count;
  };
  for (const NamedTensors& inputs : {inputs_, few}) {
    auto hot = (*model)->Forward(inputs);
    ASSERT_TRUE(hot.ok()) << hot.status();
    const int64_t serving = FootprintOf(**model).owned_bytes();
    ASSERT_TRUE((*model)->Demote(casting::WeightTier::kCool).ok());
    auto cool = (*model)->Forward(inputs);
    ASSERT_TRUE(cool.ok()) << cool.status();
    // At least the 14 fp8 projections.
    EXPECT_GE(serving_mapped(), 14);
    EXPECT_LT(FootprintOf(**model).owned_bytes(), serving);
    ASSERT_TRUE((*model)
                    ->Promote(casting::WeightTier::kHot, [] { return false; })
                    .ok());
    EXPECT_EQ(serving_mapped(), 0);
    EXPECT_EQ(FootprintOf(**model).owned_bytes(), serving);
    auto promoted = (*model)->Forward(inputs);
    ASSERT_TRUE(promoted.ok()) << promoted.status();
    EXPECT_TRUE(hot->at("logits").equal(cool->at("logits")));
    EXPECT_TRUE(hot->at("logits").equal(promoted->at("logits")));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, PrequantizedLlamaTest,
                         ::testing::Values("fp8_block", "ct_channel",
                                           "ct_tensor", "fbgemm"));

// A checkpoint's tensors as raw bytes (fp8 included), by name.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
using RawTensors = std::map<std::string, RawTensor>;

RawTensors ReadRaw(const std::string& path) {
  auto checkpoint = casting::OpenSafetensors(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  RawTensors tensors;
  for (const casting::TensorEntry& entry : (*checkpoint)->tensors()) {
    RawTensor& raw = tensors[entry.name];
    raw.dtype = std::string(casting::DTypeName(entry.dtype));
    raw.shape = entry.shape;
    raw.bytes.resize(entry.size_bytes);
    EXPECT_TRUE((*checkpoint)
                    ->CopyTo(entry, absl::MakeSpan(reinterpret_cast<uint8_t*>(
                                                       raw.bytes.data()),
                                                   raw.bytes.size()))
                    .ok());
  }
  return tensors;
}

void WriteRaw(const std::string& path, const RawTensors& tensors) {
  std::vector<casting::test_util::HeaderTensor> header;
  std::string data;
  for (const auto& [name, raw] : tensors) {
    header.push_back({name, raw.dtype, raw.shape, data.size(),
                      data.size() + raw.bytes.size()});
    data += raw.bytes;
  }
  ASSERT_TRUE(casting::test_util::WriteSafetensorsFile(
                  path, casting::test_util::MakeHeaderJson(header), data)
                  .ok());
}

// A copy of the fp8_block folder with its config.json text and its tensors
// edited, for the refusals.
std::string BrokenCopy(const std::string& name,
                       const std::function<void(std::string&)>& edit_config,
                       const std::function<void(RawTensors&)>& edit_tensors) {
  const std::string folder = test_util::MakeScratchDir(name);
  std::ifstream in(std::string(kFixtures) + "fp8_block/config.json");
  std::string config((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
  edit_config(config);
  std::ofstream(folder + "/config.json") << config;
  RawTensors tensors =
      ReadRaw(std::string(kFixtures) + "fp8_block/model.safetensors");
  edit_tensors(tensors);
  WriteRaw(folder + "/model.safetensors", tensors);
  return folder;
}

void Replace(std::string& text, const std::string& from,
             const std::string& to) {
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
}

TEST(PrequantizedLlamaRefusalTest, BrokenFoldersAreRefusedNamingTheCause) {
  const std::string scale = "model.layers.0.mlp.up_proj.weight_scale_inv";
  const auto keep_config = [](std::string&) {};
  const auto keep_tensors = [](RawTensors&) {};
  struct Case {
    std::string name;
    std::function<void(std::string&)> config;
    std::function<void(RawTensors&)> tensors;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"wrong_scale_shape",
       keep_config,
       [&](RawTensors& t) {
         t[scale].shape = {2, 3};
         t[scale].bytes.resize(2 * 3 * 4);
       },
       {scale, "[2, 3]", "needs [6, 2]"}},
      {"missing_scale",
       keep_config,
       [&](RawTensors& t) { t.erase(scale); },
       {"'model.layers.0.mlp.up_proj.weight'", "no scale"}},
      {"unknown_quant_method",
       [](std::string& c) {
         Replace(c, R"("quant_method": "fp8")", R"("quant_method": "awq")");
       },
       keep_tensors,
       {"quant_method", "awq"}},
      {"orphan_scale",
       keep_config,
       [](RawTensors& t) {
         t["model.layers.1.self_attn.q_proj.input_scale"] = {
             "F32", {1}, std::string(4, '\0')};
       },
       {"'model.layers.1.self_attn.q_proj.input_scale'", "no weight claims"}},
      {"scales_without_config",
       [](std::string& c) { Replace(c, "\"quantization_config\"", "\"x\""); },
       keep_tensors,
       {"no quantization_config"}},
  };
  for (const Case& broken : cases) {
    const std::string folder =
        BrokenCopy(broken.name, broken.config, broken.tensors);
    auto model = LoadHfModel(folder, WeightPolicyOptions{});
    ASSERT_FALSE(model.ok()) << broken.name;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument)
        << broken.name;
    for (const std::string& part : broken.message) {
      EXPECT_THAT(model.status().message(), HasSubstr(part)) << broken.name;
    }
  }
}

}  // namespace
}  // namespace castserve::models
