#include "models/loading/prequantized_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/formats/checkpoint.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"

namespace castserve::models {
namespace {

using casting::Scaling;
using casting::test_util::HeaderTensor;
using ::testing::HasSubstr;

struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

int64_t BytesOf(const Tensor& tensor) {
  int64_t count = 1;
  for (int64_t dim : tensor.shape) count *= dim;
  const int64_t width = tensor.dtype == "F8_E4M3" || tensor.dtype == "F8_E5M2"
                            ? 1
                            : (tensor.dtype == "F32" ? 4 : 2);
  return count * width;
}

// A safetensors file of zero-filled `tensors`, opened.
std::unique_ptr<casting::Checkpoint> MakeCheckpoint(
    const std::vector<Tensor>& tensors) {
  static int counter = 0;
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ckpt",
                                        counter++, ".safetensors");
  std::vector<HeaderTensor> header;
  uint64_t offset = 0;
  for (const Tensor& tensor : tensors) {
    const uint64_t size = BytesOf(tensor);
    header.push_back(
        {tensor.name, tensor.dtype, tensor.shape, offset, offset + size});
    offset += size;
  }
  EXPECT_TRUE(casting::test_util::WriteSafetensorsFile(
                  path, casting::test_util::MakeHeaderJson(header),
                  std::string(offset, '\0'))
                  .ok());
  absl::StatusOr<std::unique_ptr<casting::Checkpoint>> checkpoint =
      casting::OpenSafetensors(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return *std::move(checkpoint);
}

absl::StatusOr<PrequantizedWeights> Read(absl::string_view quantization,
                                         const std::vector<Tensor>& tensors) {
  const std::string json =
      quantization.empty()
          ? std::string(R"({"model_type": "llama"})")
          : absl::StrCat(R"({"model_type": "llama", "quantization_config": )",
                         quantization, "}");
  absl::StatusOr<HfConfig> config = HfConfig::Parse(json, "config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return PrequantizedWeights::Read(*config, *MakeCheckpoint(tensors));
}

constexpr absl::string_view kFp8Block =
    R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [16, 32]})";

// A [40, 70] weight: 16x32 blocks leave ragged last blocks (3 x 3 scales).
const std::vector<Tensor> kBlockTensors = {
    {"model.up.weight", "F8_E4M3", {40, 70}},
    {"model.up.weight_scale_inv", "F32", {3, 3}},
    {"model.norm.weight", "F32", {70}},
};

TEST(PrequantizedWeightsTest, NoConfigAndNoScalesIsEmpty) {
  absl::StatusOr<PrequantizedWeights> weights =
      Read("", {{"model.up.weight", "F32", {4, 4}}});
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_TRUE(weights->empty());
  EXPECT_EQ(weights->note(), "");
}

TEST(PrequantizedWeightsTest, Fp8BlockLayoutKeepsTheFileFormat) {
  absl::StatusOr<PrequantizedWeights> weights = Read(kFp8Block, kBlockTensors);
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->size(), 1u);
  const PrequantizedWeight* up = weights->Find("model.up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->format.ToString(), "F8_E4M3FN:per_block_16x32");
  EXPECT_EQ(up->scales_key, "model.up.weight_scale_inv");
  EXPECT_EQ(weights->Find("model.norm.weight"), nullptr);
  EXPECT_THAT(weights->note(), HasSubstr("dynamic activation quantization is "
                                         "not applied"));
}

TEST(PrequantizedWeightsTest, CompressedTensorsChannelAndTensorStrategies) {
  for (const auto& [strategy, scale_shape, scaling] :
       {std::tuple<std::string, std::vector<int64_t>, Scaling>{
            "channel", {40, 1}, Scaling::kPerRow},
        {"tensor", {1}, Scaling::kPerTensor}}) {
    const std::string config = absl::StrCat(
        R"({"quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"],
              "weights": {"num_bits": 8, "type": "float", "symmetric": true,
                          "strategy": ")",
        strategy, R"(", "dynamic": false},
              "input_activations": {"num_bits": 8, "type": "float",
                 "strategy": "token", "dynamic": true}}}})");
    absl::StatusOr<PrequantizedWeights> weights =
        Read(config, {{"model.up.weight", "F8_E4M3", {40, 70}},
                      {"model.up.weight_scale", "BF16", scale_shape}});
    ASSERT_TRUE(weights.ok()) << strategy << ": " << weights.status();
    ASSERT_NE(weights->Find("model.up.weight"), nullptr);
    EXPECT_EQ(weights->Find("model.up.weight")->format.scaling, scaling);
  }
}

TEST(PrequantizedWeightsTest, FbgemmIsPerChannel) {
  absl::StatusOr<PrequantizedWeights> weights =
      Read(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})",
           {{"model.up.weight", "F8_E4M3", {40, 70}},
            {"model.up.weight_scale", "F32", {40, 1}}});
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->Find("model.up.weight")->format.ToString(),
            "F8_E4M3FN:per_row");
}

// Each refusal names the field or the tensor.
struct Refusal {
  std::string name;
  std::string config;
  std::vector<Tensor> tensors;
  std::vector<std::string> message_parts;
};

TEST(PrequantizedWeightsTest, RefusesWhatItCannotServeNamingTheCause) {
  const std::vector<Refusal> refusals = {
      {"scale without quantization_config",
       "",
       kBlockTensors,
       {"'model.up.weight_scale_inv'", "no quantization_config"}},
      {"unknown quant_method",
       R"({"quant_method": "gptq", "bits": 4})",
       kBlockTensors,
       {"quant_method", "gptq"}},
      {"wrong scale shape",
       std::string(kFp8Block),
       {{"model.up.weight", "F8_E4M3", {40, 70}},
        {"model.up.weight_scale_inv", "F32", {2, 3}}},
       {"'model.up.weight_scale_inv'", "[2, 3]", "needs [3, 3]"}},
      {"missing scale",
       std::string(kFp8Block),
       {{"model.up.weight", "F8_E4M3", {40, 70}},
        {"model.down.weight", "F8_E4M3", {70, 40}},
        {"model.up.weight_scale_inv", "F32", {3, 3}}},
       {"'model.down.weight'", "no scale", "model.down.weight_scale_inv"}},
      {"orphan input scale",
       std::string(kFp8Block),
       {{"model.up.weight", "F8_E4M3", {40, 70}},
        {"model.up.weight_scale_inv", "F32", {3, 3}},
        {"model.up.input_scale", "F32", {1}}},
       {"'model.up.input_scale'", "no weight claims"}},
      {"scale without its weight",
       std::string(kFp8Block),
       {{"model.gone.weight_scale_inv", "F32", {3, 3}}},
       {"'model.gone.weight_scale_inv'", "'model.gone.weight' is missing"}},
      {"static activations",
       R"({"quant_method": "fp8", "activation_scheme": "static",
           "weight_block_size": [16, 32]})",
       kBlockTensors,
       {"activation_scheme", "static"}},
      {"unknown field",
       R"({"quant_method": "fp8", "weight_block_size": [16, 32],
           "shuffle_rows": true})",
       kBlockTensors,
       {"shuffle_rows"}},
      {"ue8m0 scales",
       R"({"quant_method": "fp8", "weight_block_size": [16, 32],
           "scale_fmt": "ue8m0"})",
       kBlockTensors,
       {"scale_fmt", "ue8m0"}},
      {"unknown strategy",
       R"({"quant_method": "compressed-tensors", "format": "float-quantized",
           "config_groups": {"g": {"targets": ["Linear"], "weights": {
             "num_bits": 8, "type": "float", "strategy": "tensor_group"}}}})",
       {{"model.up.weight", "F8_E4M3", {40, 70}},
        {"model.up.weight_scale", "F32", {1}}},
       {"strategy", "tensor_group"}},
      {"int weights",
       R"({"quant_method": "compressed-tensors", "format": "float-quantized",
           "config_groups": {"g": {"targets": ["Linear"], "weights": {
             "num_bits": 4, "type": "int", "strategy": "channel"}}}})",
       {},
       {"num_bits", "4"}},
      {"static input scales",
       R"({"quant_method": "compressed-tensors", "format": "float-quantized",
           "config_groups": {"g": {"targets": ["Linear"],
             "weights": {"num_bits": 8, "type": "float",
                         "strategy": "channel"},
             "input_activations": {"num_bits": 8, "type": "float",
                                   "strategy": "tensor",
                                   "dynamic": false}}}})",
       {},
       {"input_activations", "dynamic", "static"}},
      {"pack-quantized format",
       R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
           "config_groups": {}})",
       {},
       {"format", "pack-quantized"}},
      {"kv cache scheme",
       R"({"quant_method": "compressed-tensors", "format": "float-quantized",
           "kv_cache_scheme": {"num_bits": 8, "type": "float"},
           "config_groups": {}})",
       {},
       {"kv_cache_scheme"}},
  };
  for (const Refusal& refusal : refusals) {
    absl::StatusOr<PrequantizedWeights> weights =
        Read(refusal.config, refusal.tensors);
    ASSERT_FALSE(weights.ok()) << refusal.name;
    EXPECT_EQ(weights.status().code(), absl::StatusCode::kInvalidArgument)
        << refusal.name;
    for (const std::string& part : refusal.message_parts) {
      EXPECT_THAT(weights.status().message(), HasSubstr(part)) << refusal.name;
    }
  }
}

}  // namespace
}  // namespace castserve::models
