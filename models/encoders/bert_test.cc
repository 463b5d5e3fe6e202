#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "casting/casting_policy.h"
#include "casting/codec/storage_format.h"
#include "gmock/gmock.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using casting::ComputeCopyPolicy;
using casting::ElementType;
using casting::Residency;
using ::testing::HasSubstr;

constexpr char kBert[] = "models/testdata/bert";
constexpr char kBertBin[] = "models/testdata/bert_bin";
constexpr char kMiniLm[] = "models/testdata/minilm";

std::map<std::string, at::Tensor> ReadReference(const std::string& folder) {
  auto tensors = test_util::ReadSafetensors(folder + "/reference.safetensors");
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

// A layerwise-casting policy storing in `format` ("F8_E4M3FN:per_row").
casting::CastingPolicy Policy(const std::string& format,
                              ElementType compute_dtype) {
  casting::StorageFormat storage = *casting::StorageFormat::Parse(format);
  casting::CastingPolicy::Options options;
  options.storage_dtype = storage.element;
  options.scaling = storage.scaling;
  options.compute_dtype = compute_dtype;
  return *casting::CastingPolicy::Create(options);
}

NamedTensors RunOrDie(const std::string& folder,
                      const WeightPolicyOptions& options,
                      const NamedTensors& inputs) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(folder, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  absl::StatusOr<NamedTensors> outputs = (*model)->Forward(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? *outputs : NamedTensors{};
}

// The weight policies without casting, by name.
struct PlainPolicy {
  const char* name;
  Residency residency;
  ComputeCopyPolicy compute_copy;
  bool eager;
};
constexpr PlainPolicy kPlainPolicies[] = {
    {"eager_f32", Residency::kResident, ComputeCopyPolicy::kCached, true},
    {"mapped_transient", Residency::kMapped, ComputeCopyPolicy::kTransient,
     false},
    {"lazy_upcast_cached", Residency::kMapped, ComputeCopyPolicy::kCached,
     false},
    {"resident_lazy_transient", Residency::kResident,
     ComputeCopyPolicy::kTransient, false},
};

TEST(BertModelTest, MatchesTransformersUnderEveryPlainPolicy) {
  auto reference = ReadReference(kBert);
  for (const PlainPolicy& policy : kPlainPolicies) {
    WeightPolicyOptions options;
    options.residency = policy.residency;
    options.compute_copy = policy.compute_copy;
    options.eager = policy.eager;
    NamedTensors outputs = RunOrDie(kBert, options, Inputs(reference));
    for (const char* name : {"last_hidden_state", "pooler_output"}) {
      ASSERT_EQ(outputs.count(name), 1u) << policy.name;
      EXPECT_LT(test_util::RelativeMaxError(
                    outputs[name], reference.at(std::string("output.") + name)),
                1e-4)
          << policy.name << " " << name;
    }
  }
}

TEST(BertModelTest, LayerwiseCastingF32MatchesRoundTripReference) {
  auto reference = ReadReference(kBert);
  for (const std::string& format : test_util::CastFormatNames()) {
    for (bool prefetch : {false, true}) {
      WeightPolicyOptions options;
      options.casting = Policy(format, ElementType::kF32);
      options.compute_copy = ComputeCopyPolicy::kTransient;
      options.prefetch = prefetch;
      NamedTensors outputs = RunOrDie(kBert, options, Inputs(reference));
      for (const char* name : {"last_hidden_state", "pooler_output"}) {
        const at::Tensor& expected =
            reference.at("roundtrip." + format + ".output." + name);
        EXPECT_LT(test_util::RelativeMaxError(outputs[name], expected), 1e-4)
            << format << " " << name << " prefetch=" << prefetch;
      }
    }
  }
}

TEST(BertModelTest, Bf16ComputeIsCloseToF32) {
  auto reference = ReadReference(kBert);
  WeightPolicyOptions plain;
  plain.compute_dtype = ElementType::kBF16;
  NamedTensors outputs = RunOrDie(kBert, plain, Inputs(reference));
  for (const char* name : {"last_hidden_state", "pooler_output"}) {
    EXPECT_EQ(outputs[name].scalar_type(), at::kFloat);
    EXPECT_GE(test_util::CosineSimilarity(
                  outputs[name], reference.at(std::string("output.") + name)),
              0.999)
        << name;
  }
  for (const std::string& format : test_util::CastFormatNames()) {
    WeightPolicyOptions options;
    options.casting = Policy(format, ElementType::kBF16);
    options.compute_copy = ComputeCopyPolicy::kTransient;
    NamedTensors cast = RunOrDie(kBert, options, Inputs(reference));
    for (const char* name : {"last_hidden_state", "pooler_output"}) {
      EXPECT_GE(test_util::CosineSimilarity(
                    cast[name],
                    reference.at("roundtrip." + format + ".output." + name)),
                0.999)
          << format << " " << name;
    }
  }
}

// Cosine similarity per format to the unquantized reference, for the
// closing note; scaled fp8 (per row and per tensor) must not be worse than
// plain fp8.
TEST(BertModelTest, ReportsAccuracyPerFormat) {
  auto reference = ReadReference(kBert);
  std::map<std::string, double> cosine;
  for (const std::string& format : test_util::CastFormatNames()) {
    WeightPolicyOptions options;
    options.casting = Policy(format, ElementType::kF32);
    options.compute_copy = ComputeCopyPolicy::kTransient;
    NamedTensors outputs = RunOrDie(kBert, options, Inputs(reference));
    cosine[format] = test_util::CosineSimilarity(
        outputs["last_hidden_state"], reference.at("output.last_hidden_state"));
    std::printf("bert %-22s cosine to f32 reference %.6f\n", format.c_str(),
                cosine[format]);
  }
  EXPECT_GE(cosine["F8_E4M3FN:per_row"], cosine["F8_E4M3FN"]);
  EXPECT_GE(cosine["F8_E5M2:per_row"], cosine["F8_E5M2"]);
  EXPECT_GE(cosine["F8_E4M3FN:per_tensor"], cosine["F8_E4M3FN"]);
  EXPECT_GE(cosine["F8_E5M2:per_tensor"], cosine["F8_E5M2"]);
}

TEST(BertModelTest, LoadsPytorchModelBin) {
  auto reference = ReadReference(kBertBin);
  WeightPolicyOptions options;
  options.residency = Residency::kMapped;
  NamedTensors outputs = RunOrDie(kBertBin, options, Inputs(reference));
  EXPECT_LT(
      test_util::RelativeMaxError(outputs["last_hidden_state"],
                                  reference.at("output.last_hidden_state")),
      1e-4);
}

TEST(BertModelTest, FindsWeightsUnderBertPrefix) {
  auto weights =
      test_util::ReadSafetensors(std::string(kBert) + "/model.safetensors");
  ASSERT_TRUE(weights.ok());
  std::map<std::string, at::Tensor> prefixed;
  for (const auto& [name, tensor] : *weights) prefixed["bert." + name] = tensor;
  prefixed["cls.predictions.bias"] = at::zeros({211});
  const std::string folder = test_util::MakeScratchDir("bert_prefix");
  ASSERT_TRUE(
      test_util::WriteSafetensors(folder + "/model.safetensors", prefixed)
          .ok());
  std::ifstream config_in(std::string(kBert) + "/config.json");
  std::ofstream(folder + "/config.json") << config_in.rdbuf();
  auto reference = ReadReference(kBert);
  NamedTensors outputs = RunOrDie(folder, {}, Inputs(reference));
  EXPECT_LT(test_util::RelativeMaxError(outputs["pooler_output"],
                                        reference.at("output.pooler_output")),
            1e-4);
}

TEST(BertModelTest, OptionalInputsDefaultToOnesAndZeros) {
  auto reference = ReadReference(kBert);
  auto model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok());
  NamedTensors full = Inputs(reference);
  full["attention_mask"] = at::ones_like(full["input_ids"]);
  full["token_type_ids"] = at::zeros_like(full["input_ids"]);
  NamedTensors only_ids = {{"input_ids", full["input_ids"]}};
  auto a = (*model)->Forward(full);
  auto b = (*model)->Forward(only_ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(
      at::allclose(a->at("last_hidden_state"), b->at("last_hidden_state")));
}

TEST(BertModelTest, RejectsBadInputsWithInvalidArgument) {
  auto model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok());
  auto code = [&](NamedTensors inputs) {
    return (*model)->Forward(inputs).status().code();
  };
  const at::Tensor ids = at::ones({1, 4}, at::kLong);
  EXPECT_EQ(code({{"input_ids", ids * 211}}),
            absl::StatusCode::kInvalidArgument);  // Outside the vocabulary.
  EXPECT_EQ(code({{"input_ids", at::ones({1, 65}, at::kLong)}}),
            absl::StatusCode::kInvalidArgument);  // Past the position table.
  EXPECT_EQ(code({{"input_ids", ids.to(at::kFloat)}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"input_ids", at::ones({4}, at::kLong)}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"attention_mask", ids}}),
            absl::StatusCode::kInvalidArgument);  // No input_ids.
  EXPECT_EQ(code({{"input_ids", ids}, {"pixel_values", ids}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"input_ids", ids}, {"token_type_ids", ids * 2}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"input_ids", ids}, {"attention_mask", ids.view({4, 1})}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"input_ids", ids}}), absl::StatusCode::kOk);
}

TEST(BertModelTest, DeclaresItsSignature) {
  auto model = LoadHfModel(kBert, {});
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->architecture(), "bert");
  ASSERT_EQ((*model)->inputs().size(), 3u);
  EXPECT_EQ((*model)->inputs()[0].name, "input_ids");
  EXPECT_FALSE((*model)->inputs()[0].optional);
  EXPECT_TRUE((*model)->inputs()[1].optional);
  ASSERT_EQ((*model)->outputs().size(), 2u);
  EXPECT_EQ((*model)->outputs()[0].shape, (std::vector<int64_t>{-1, -1, 32}));
  EXPECT_EQ((*model)->outputs()[1].name, "pooler_output");
}

// The bert fixture's weights with `replaced` swapped in, under a
// config.json that is the fixture's with `sizes` changed; returns the folder.
std::string WriteBertVariant(const std::string& name,
                             const std::map<std::string, at::Tensor>& replaced,
                             const std::map<std::string, int64_t>& sizes) {
  auto weights =
      test_util::ReadSafetensors(std::string(kBert) + "/model.safetensors");
  EXPECT_TRUE(weights.ok()) << weights.status();
  for (const auto& [key, tensor] : replaced) (*weights)[key] = tensor;
  const std::string folder = test_util::MakeScratchDir(name);
  EXPECT_TRUE(
      test_util::WriteSafetensors(folder + "/model.safetensors", *weights)
          .ok());
  std::map<std::string, int64_t> config = {
      {"vocab_size", 211},       {"hidden_size", 32},
      {"num_hidden_layers", 2},  {"num_attention_heads", 4},
      {"intermediate_size", 64}, {"max_position_embeddings", 64},
      {"type_vocab_size", 2}};
  for (const auto& [key, value] : sizes) config[key] = value;
  std::ofstream out(folder + "/config.json");
  out << R"({"model_type": "bert")";
  for (const auto& [key, value] : config) {
    out << ", \"" << key << "\": " << value;
  }
  out << "}";
  return folder;
}

// Loads `folder` mapped and lazily (headers only) and returns the error.
std::string LoadError(const std::string& folder) {
  WeightPolicyOptions options;
  options.residency = Residency::kMapped;
  absl::StatusOr<std::unique_ptr<Model>> model = LoadHfModel(folder, options);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument)
      << model.status();
  return std::string(model.status().message());
}

TEST(BertModelTest, MisshapedWeightsFailAtLoadNamingTheTensor) {
  EXPECT_TRUE(LoadHfModel(WriteBertVariant("bert_same", {}, {}), {}).ok());
  EXPECT_THAT(LoadError(WriteBertVariant(
                  "bert_query",
                  {{"encoder.layer.0.attention.self.query.weight",
                    at::zeros({32, 16})}},
                  {})),
              HasSubstr("weight 'encoder.layer.0.attention.self.query.weight': "
                        "expected shape [32, 32], found [32, 16]"));
  EXPECT_THAT(
      LoadError(WriteBertVariant(
          "bert_norm", {{"embeddings.LayerNorm.weight", at::ones({64})}}, {})),
      HasSubstr("weight 'embeddings.LayerNorm.weight': expected shape [32], "
                "found [64]"));
  EXPECT_THAT(
      LoadError(WriteBertVariant(
          "bert_bias", {{"encoder.layer.1.output.dense.bias", at::ones({64})}},
          {})),
      HasSubstr("weight 'encoder.layer.1.output.dense.bias': expected shape "
                "[32], found [64]"));
  EXPECT_THAT(
      LoadError(WriteBertVariant("bert_vocab", {}, {{"vocab_size", 64}})),
      HasSubstr("weight 'embeddings.word_embeddings.weight': expected "
                "shape [64, 32], found [211, 32]"));
  EXPECT_THAT(
      LoadError(
          WriteBertVariant("bert_inner", {}, {{"intermediate_size", 48}})),
      HasSubstr("weight 'encoder.layer.0.intermediate.dense.weight': expected "
                "shape [48, 32], found [64, 32]"));
}

TEST(BertConfigTest, SizesOutOfRangeFailNamingTheField) {
  EXPECT_THAT(LoadError(WriteBertVariant("bert_huge", {},
                                         {{"hidden_size", 1000000000}})),
              HasSubstr("hidden_size is 1000000000, outside [1, 65536]"));
  EXPECT_THAT(
      LoadError(WriteBertVariant("bert_huge_inner", {},
                                 {{"intermediate_size", 1000000000000}})),
      HasSubstr("intermediate_size is 1000000000000, outside "
                "[1, 1048576]"));
  EXPECT_THAT(LoadError(WriteBertVariant("bert_no_types", {},
                                         {{"type_vocab_size", 0}})),
              HasSubstr("type_vocab_size is 0, outside [1, 1024]"));
  EXPECT_THAT(
      LoadError(
          WriteBertVariant("bert_heads", {}, {{"num_attention_heads", 5}})),
      HasSubstr("hidden_size 32 is not a multiple of num_attention_heads 5"));
}

// The real all-MiniLM-L6-v2: mean-pooled embeddings against
// sentence-transformers' (weights fetched by tools/fetch_minilm.sh).
at::Tensor MeanPool(const at::Tensor& hidden, const at::Tensor& mask) {
  at::Tensor weights = mask.to(at::kFloat).unsqueeze(-1);
  return (hidden * weights).sum(1) / weights.sum(1);
}

TEST(BertModelTest, MiniLmEmbeddingsMatchSentenceTransformers) {
  const std::string weights = std::string(kMiniLm) + "/weights";
  ASSERT_TRUE(std::ifstream(weights + "/model.safetensors").good())
      << "the MiniLM weights are missing: run tools/fetch_minilm.sh (the "
         "README's test command does)";
  auto reference = ReadReference(kMiniLm);
  const at::Tensor& expected = reference.at("output.sentence_embedding");
  NamedTensors inputs = Inputs(reference);
  struct Case {
    const char* label;
    std::optional<std::string> format;
    ElementType compute;
    double min_cosine;
  };
  const Case cases[] = {
      {"f32", std::nullopt, ElementType::kF32, 0.9999},
      {"bf16 compute", std::nullopt, ElementType::kBF16, 0.99},
      {"BF16 storage", "BF16", ElementType::kF32, 0.999},
      {"F8_E4M3FN:per_row", "F8_E4M3FN:per_row", ElementType::kF32, 0.99},
      {"F8_E5M2:per_row", "F8_E5M2:per_row", ElementType::kF32, 0.98}};
  for (const Case& c : cases) {
    WeightPolicyOptions options;
    options.compute_dtype = c.compute;
    if (c.format) {
      options.casting = Policy(*c.format, c.compute);
      options.compute_copy = ComputeCopyPolicy::kTransient;
    }
    NamedTensors outputs = RunOrDie(weights, options, inputs);
    at::Tensor embedding =
        MeanPool(outputs["last_hidden_state"], inputs["attention_mask"]);
    double worst = 1;
    for (int64_t i = 0; i < embedding.size(0); ++i) {
      worst = std::min(worst,
                       test_util::CosineSimilarity(embedding[i], expected[i]));
    }
    std::printf("minilm %-18s min cosine to reference %.6f\n", c.label, worst);
    EXPECT_GE(worst, c.min_cosine) << c.label;
  }
}

}  // namespace
}  // namespace castserve::models
