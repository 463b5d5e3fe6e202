// The encoder architectures on the shared encoder blocks against fixtures
// transformers 5 and sentence-transformers wrote
// (tools/gen_encoder_fixtures.py): XLM-RoBERTa's hidden states, pooler and
// sentence embedding; the cross-encoders' scores (XLM-RoBERTa and BERT
// sequence classifiers) against the model's logits and CrossEncoder.predict;
// fp8 layerwise casting against the round-tripped reference; the labels;
// and what a load refuses, naming it.
#include <ATen/ATen.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/casting_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/encoders/encoder_model.h"
#include "models/generation/incremental_decoder.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

constexpr char kCastFormat[] = "F8_E4M3FN:per_row";

Tensors Reference(const std::string& folder) {
  auto reference =
      test_util::ReadSafetensors(folder + "/reference.safetensors");
  EXPECT_TRUE(reference.ok()) << reference.status();
  return reference.ok() ? *std::move(reference) : Tensors{};
}

NamedTensors Inputs(const Tensors& reference, const std::string& prefix) {
  NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    auto it = reference.find(prefix + name);
    if (it != reference.end()) inputs[name] = it->second;
  }
  return inputs;
}

WeightPolicyOptions Casting() {
  auto storage = casting::StorageFormat::Parse(kCastFormat);
  EXPECT_TRUE(storage.ok()) << storage.status();
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = storage->element;
  policy.scaling = storage->scaling;
  policy.compute_dtype = casting::ElementType::kF32;
  WeightPolicyOptions options;
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.prefetch = true;
  return options;
}

NamedTensors RunModel(const std::string& folder,
                      const WeightPolicyOptions& options,
                      const NamedTensors& inputs) {
  auto model = LoadHfModel(folder, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto outputs = (*model)->Forward(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? *std::move(outputs) : NamedTensors{};
}

std::vector<WeightPolicyOptions> PlainPolicies() {
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  WeightPolicyOptions eager;
  eager.eager = true;
  return {WeightPolicyOptions{}, mapped, eager};
}

constexpr char kXlmRoberta[] = "models/testdata/xlm_roberta";

TEST(XlmRobertaTest, MatchesTransformersAndSentenceTransformers) {
  const Tensors reference = Reference(kXlmRoberta);
  for (const WeightPolicyOptions& options : PlainPolicies()) {
    NamedTensors out =
        RunModel(kXlmRoberta, options, Inputs(reference, "input."));
    for (const char* name :
         {"last_hidden_state", "pooler_output", "sentence_embedding"}) {
      ASSERT_TRUE(out.count(name)) << name;
      EXPECT_LE(test_util::RelativeMaxError(
                    out[name], reference.at(absl::StrCat("output.", name))),
                1e-4)
          << name;
    }
    const at::Tensor cosine =
        at::cosine_similarity(out["sentence_embedding"],
                              reference.at("output.sentence_embedding"), 1);
    EXPECT_GE(cosine.min().item<double>(), 0.9999);
  }
}

TEST(XlmRobertaTest, LayerwiseFp8MatchesRoundTripReference) {
  const Tensors reference = Reference(kXlmRoberta);
  NamedTensors out =
      RunModel(kXlmRoberta, Casting(), Inputs(reference, "input."));
  for (const char* name : {"last_hidden_state", "pooler_output"}) {
    EXPECT_LE(test_util::RelativeMaxError(
                  out[name], reference.at(absl::StrCat(
                                 "roundtrip.", kCastFormat, ".output.", name))),
              1e-4)
        << name;
  }
}

TEST(XlmRobertaTest, PositionsStartAfterPaddingIdx) {
  auto model = LoadHfModel(kXlmRoberta, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "xlm-roberta");
  // 66 positions less padding_idx 1 and the padding position itself.
  EXPECT_EQ((*model)->max_sequence_length(), 64);
  // Padding ids on the left shift no real token's position: the real
  // tokens' states equal those of the unpadded sequence.
  const at::Tensor ids = at::tensor({0, 30, 16, 28, 2}, at::kLong).view({1, 5});
  const at::Tensor padded =
      at::cat({at::ones({1, 3}, at::kLong), ids}, 1);  // pad id 1
  const at::Tensor mask = padded.ne(1).to(at::kLong);
  auto plain = (*model)->Forward({{"input_ids", ids}});
  auto left =
      (*model)->Forward({{"input_ids", padded}, {"attention_mask", mask}});
  ASSERT_TRUE(plain.ok() && left.ok());
  EXPECT_LE(
      test_util::RelativeMaxError(left->at("last_hidden_state").slice(1, 3),
                                  plain->at("last_hidden_state")),
      1e-5);
  auto too_long =
      (*model)->Forward({{"input_ids", at::zeros({1, 65}, at::kLong)}});
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
}

constexpr char kQwen3Embedding[] = "models/testdata/qwen3_embedding";

// The rows of `hidden` [batch, seq, dim] where `mask` is 1: [tokens, dim].
at::Tensor RealTokens(const at::Tensor& hidden, const at::Tensor& mask) {
  return hidden.reshape({-1, hidden.size(-1)})
      .index_select(0, mask.flatten().nonzero().flatten());
}

TEST(Qwen3EmbeddingTest, MatchesTransformersAndSentenceTransformers) {
  const Tensors reference = Reference(kQwen3Embedding);
  const NamedTensors inputs = Inputs(reference, "input.");
  const at::Tensor& mask = inputs.at("attention_mask");
  for (const WeightPolicyOptions& options : PlainPolicies()) {
    NamedTensors out = RunModel(kQwen3Embedding, options, inputs);
    ASSERT_TRUE(out.count("last_hidden_state") &&
                out.count("sentence_embedding"));
    EXPECT_LE(test_util::RelativeMaxError(
                  RealTokens(out["last_hidden_state"], mask),
                  RealTokens(reference.at("output.last_hidden_state"), mask)),
              1e-4);
    const at::Tensor& expected = reference.at("output.sentence_embedding");
    EXPECT_LE(test_util::RelativeMaxError(out["sentence_embedding"], expected),
              1e-4);
    EXPECT_GE(at::cosine_similarity(out["sentence_embedding"], expected, 1)
                  .min()
                  .item<double>(),
              0.9999);
  }
  NamedTensors cast = RunModel(kQwen3Embedding, Casting(), inputs);
  EXPECT_LE(
      test_util::RelativeMaxError(
          RealTokens(cast["last_hidden_state"], mask),
          RealTokens(reference.at(absl::StrCat("roundtrip.", kCastFormat,
                                               ".output.last_hidden_state")),
                     mask)),
      1e-4);
}

TEST(Qwen3EmbeddingTest, LeftPaddingGivesTheSameEmbeddings) {
  const Tensors reference = Reference(kQwen3Embedding);
  const at::Tensor& ids = reference.at("input.input_ids");
  const at::Tensor& mask = reference.at("input.attention_mask");
  // Each row's tokens moved to the right end, the padding before them.
  at::Tensor left_ids = at::zeros_like(ids), left_mask = at::zeros_like(mask);
  for (int64_t r = 0; r < ids.size(0); ++r) {
    const int64_t n = mask[r].sum().item<int64_t>();
    left_ids[r].narrow(0, ids.size(1) - n, n).copy_(ids[r].narrow(0, 0, n));
    left_mask[r].narrow(0, ids.size(1) - n, n).fill_(1);
  }
  NamedTensors out =
      RunModel(kQwen3Embedding, {},
               {{"input_ids", left_ids}, {"attention_mask", left_mask}});
  EXPECT_LE(
      test_util::RelativeMaxError(out["sentence_embedding"],
                                  reference.at("output.sentence_embedding")),
      1e-4);
}

TEST(Qwen3EmbeddingTest, ABackboneAloneServesHiddenStatesAndDoesNotGenerate) {
  auto model = LoadHfModel(kQwen3Embedding, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "qwen3");
  EXPECT_EQ((*model)->incremental_decoder(), nullptr);
  std::vector<std::string> outputs;
  for (const TensorSpec& spec : (*model)->outputs())
    outputs.push_back(spec.name);
  EXPECT_THAT(outputs, ElementsAre("last_hidden_state", "sentence_embedding"));
  // The same architecture with lm_head still generates.
  auto generator = LoadHfModel("models/testdata/qwen3", {});
  ASSERT_TRUE(generator.ok()) << generator.status();
  EXPECT_NE((*generator)->incremental_decoder(), nullptr);
}

struct RerankerCase {
  const char* folder;
  std::vector<std::string> labels;
};

class RerankerTest : public ::testing::TestWithParam<RerankerCase> {};

TEST_P(RerankerTest, ScoresMatchTransformersAndCrossEncoder) {
  const std::string folder = GetParam().folder;
  const Tensors reference = Reference(folder);
  for (const WeightPolicyOptions& options : PlainPolicies()) {
    NamedTensors out = RunModel(folder, options, Inputs(reference, "input."));
    ASSERT_EQ(out.size(), 1u);
    const at::Tensor& scores = out[kScoresOutput];
    EXPECT_LE(
        test_util::RelativeMaxError(scores, reference.at("output.scores")),
        1e-4);
    EXPECT_LE(test_util::RelativeMaxError(scores,
                                          reference.at("output.cross_encoder")),
              1e-4);
  }
  NamedTensors cast = RunModel(folder, Casting(), Inputs(reference, "input."));
  EXPECT_LE(test_util::RelativeMaxError(
                cast[kScoresOutput],
                reference.at(
                    absl::StrCat("roundtrip.", kCastFormat, ".output.scores"))),
            1e-4);
}

TEST_P(RerankerTest, DeclaresScoresAndLabels) {
  auto model = LoadHfModel(GetParam().folder, Casting());
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t labels = static_cast<int64_t>(GetParam().labels.size());
  ASSERT_EQ((*model)->outputs().size(), 1u);
  EXPECT_EQ((*model)->outputs()[0].name, "scores");
  EXPECT_EQ((*model)->outputs()[0].dtype, at::kFloat);
  EXPECT_EQ((*model)->outputs()[0].shape, (std::vector<int64_t>{-1, labels}));
  EXPECT_EQ((*model)->output_labels(), GetParam().labels);
}

INSTANTIATE_TEST_SUITE_P(
    Rerankers, RerankerTest,
    ::testing::Values(
        RerankerCase{"models/testdata/xlm_roberta_reranker", {"LABEL_0"}},
        RerankerCase{"models/testdata/bert_reranker",
                     {"contradiction", "entailment", "neutral"}}));

using Edits = std::vector<std::pair<std::string, std::string>>;

// A copy of `from` whose config.json has each of `edits` applied to its
// text and whose checkpoint gains `extra` tensors; returns the folder.
std::string EditedVariant(const std::string& from, const std::string& name,
                          const Edits& edits,
                          const std::map<std::string, at::Tensor>& extra = {}) {
  auto weights = test_util::ReadSafetensors(from + "/model.safetensors");
  EXPECT_TRUE(weights.ok()) << weights.status();
  for (const auto& [key, tensor] : extra) (*weights)[key] = tensor;
  const std::string folder = test_util::MakeScratchDir(name);
  EXPECT_TRUE(
      test_util::WriteSafetensors(folder + "/model.safetensors", *weights)
          .ok());
  std::ifstream in(from + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  for (const auto& [before, after] : edits) {
    if (before.empty()) continue;
    const size_t at = config.find(before);
    EXPECT_NE(at, std::string::npos) << before;
    if (at != std::string::npos) config.replace(at, before.size(), after);
  }
  std::ofstream(folder + "/config.json") << config;
  return folder;
}

// The same with one edit.
std::string Variant(const std::string& from, const std::string& name,
                    const std::pair<std::string, std::string>& edit,
                    const std::map<std::string, at::Tensor>& extra = {}) {
  return EditedVariant(from, name, Edits{edit}, extra);
}

std::string LoadError(const std::string& folder) {
  auto model = LoadHfModel(folder, {});
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument)
      << model.status();
  return std::string(model.status().message());
}

TEST(EncoderRefusalTest, NamesWhatItDoesNotUnderstand) {
  const std::string xlm = "models/testdata/xlm_roberta_reranker";
  const std::string bert = "models/testdata/bert_reranker";
  EXPECT_THAT(LoadError(Variant(xlm, "xlm_extra", {},
                                {{"classifier.extra.weight", at::ones({2})}})),
              HasSubstr("tensors this architecture does not read: "
                        "classifier.extra.weight"));
  // The classifier's tensors in a folder that says it is a bare model.
  EXPECT_THAT(LoadError(Variant(
                  xlm, "xlm_as_model",
                  {"XLMRobertaForSequenceClassification", "XLMRobertaModel"})),
              HasSubstr("classifier.dense.bias, classifier.dense.weight"));
  EXPECT_THAT(LoadError(Variant(bert, "bert_problem",
                                {"\"model_type\"",
                                 "\"problem_type\": \"ranking\", "
                                 "\"model_type\""})),
              HasSubstr("problem_type 'ranking'"));
  EXPECT_THAT(LoadError(Variant(bert, "bert_labels",
                                {"\"2\": \"neutral\"", "\"5\": \"neutral\""})),
              HasSubstr("id2label[\"5\"] is not a label id in [0, 3)"));
  EXPECT_THAT(LoadError(Variant(bert, "bert_relative",
                                {"\"model_type\"",
                                 "\"position_embedding_type\": \"relative_key\""
                                 ", \"model_type\""})),
              HasSubstr("position_embedding_type 'relative_key'"));
  EXPECT_THAT(
      LoadError(Variant(kXlmRoberta, "xlm_decoder",
                        {"\"is_decoder\": false", "\"is_decoder\": true"})),
      HasSubstr("is_decoder is true"));
  EXPECT_THAT(
      LoadError(Variant(kXlmRoberta, "xlm_pad",
                        {"\"pad_token_id\": 1", "\"pad_token_id\": 65"})),
      HasSubstr("pad_token_id 65 leaves no position"));
}

// ModernBERT and NomicBERT against transformers 5 and sentence-transformers:
// the real tokens' hidden states, the pipeline's sentence embedding, and
// the fp8 layerwise cast against the round-tripped reference.
void ExpectRotaryEncoderMatches(const std::string& folder,
                                const std::string& reference_folder,
                                bool sentence_embedding) {
  const Tensors reference = Reference(reference_folder);
  const NamedTensors inputs = Inputs(reference, "input.");
  const at::Tensor& mask = inputs.at("attention_mask");
  for (const WeightPolicyOptions& options : PlainPolicies()) {
    NamedTensors out = RunModel(folder, options, inputs);
    ASSERT_TRUE(out.count("last_hidden_state"));
    EXPECT_LE(test_util::RelativeMaxError(
                  RealTokens(out["last_hidden_state"], mask),
                  RealTokens(reference.at("output.last_hidden_state"), mask)),
              1e-4);
    if (!sentence_embedding) continue;
    const at::Tensor& expected = reference.at("output.sentence_embedding");
    ASSERT_TRUE(out.count("sentence_embedding"));
    EXPECT_LE(test_util::RelativeMaxError(out["sentence_embedding"], expected),
              1e-4);
    EXPECT_GE(at::cosine_similarity(out["sentence_embedding"], expected, 1)
                  .min()
                  .item<double>(),
              0.9999);
  }
  NamedTensors cast = RunModel(folder, Casting(), inputs);
  EXPECT_LE(
      test_util::RelativeMaxError(
          RealTokens(cast["last_hidden_state"], mask),
          RealTokens(reference.at(absl::StrCat("roundtrip.", kCastFormat,
                                               ".output.last_hidden_state")),
                     mask)),
      1e-4);
}

constexpr char kModernBert[] = "models/testdata/modernbert";

TEST(ModernBertTest, MatchesTransformersAndSentenceTransformers) {
  ExpectRotaryEncoderMatches(kModernBert, kModernBert, true);
}

TEST(ModernBertTest, DeclaresNoTokenTypes) {
  auto model = LoadHfModel(kModernBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "modernbert");
  std::vector<std::string> inputs;
  for (const TensorSpec& spec : (*model)->inputs()) inputs.push_back(spec.name);
  EXPECT_THAT(inputs, ElementsAre("input_ids", "attention_mask"));
  EXPECT_EQ((*model)->max_sequence_length(), 64);
}

// The hub's config keys (global_attn_every_n_layers, global_rope_theta,
// local_rope_theta) in place of transformers 5's layer_types and
// rope_parameters give the same model.
TEST(ModernBertTest, ReadsTheHubsConfigKeys) {
  const std::string folder = EditedVariant(
      kModernBert, "modernbert_hub_keys",
      {{"\"layer_types\": [\n    \"full_attention\",\n    "
        "\"sliding_attention\",\n    \"full_attention\"\n  ],",
        ""},
       {"\"rope_parameters\": {\n    \"full_attention\": {\n      "
        "\"rope_theta\": 160000.0,\n      \"rope_type\": \"default\"\n    "
        "},\n    \"sliding_attention\": {\n      \"rope_theta\": 10000.0,\n "
        "     \"rope_type\": \"default\"\n    }\n  },",
        "\"global_rope_theta\": 160000.0, \"local_rope_theta\": 10000.0,"}});
  ExpectRotaryEncoderMatches(folder, kModernBert, false);
}

// Local layers see a band of local_attention / 2 tokens each side: with
// every layer local, the first token of a 3-layer model cannot see past
// token 6; with the fixture's global layers it sees everything.
TEST(ModernBertTest, LocalLayersSeeTheirBandOnly) {
  const std::string all_local =
      Variant(kModernBert, "modernbert_all_local",
              {"\"full_attention\",\n    \"sliding_attention\",\n    "
               "\"full_attention\"",
               "\"sliding_attention\", \"sliding_attention\", "
               "\"sliding_attention\""});
  at::Tensor ids = at::arange(4, 16, at::kLong).view({1, 12});
  at::Tensor changed = ids.clone();
  changed[0][11] = 20;
  for (const auto& [folder, reaches] :
       {std::pair{all_local, false},
        std::pair{std::string(kModernBert), true}}) {
    auto model = LoadHfModel(folder, {});
    ASSERT_TRUE(model.ok()) << model.status();
    auto a = (*model)->Forward({{"input_ids", ids}});
    auto b = (*model)->Forward({{"input_ids", changed}});
    ASSERT_TRUE(a.ok() && b.ok());
    const double first_token_change =
        (a->at("last_hidden_state")[0][0] - b->at("last_hidden_state")[0][0])
            .abs()
            .max()
            .item<double>();
    EXPECT_EQ(first_token_change > 0, reaches) << folder;
  }
}

TEST(ModernBertTest, RefusesWhatItDoesNotCompute) {
  EXPECT_THAT(LoadError(Variant(
                  kModernBert, "modernbert_yarn",
                  {"\"rope_type\": \"default\"", "\"rope_type\": \"yarn\""})),
              HasSubstr("rope_type 'yarn' is not supported"));
  EXPECT_THAT(LoadError(Variant(
                  kModernBert, "modernbert_chunked",
                  {"\"sliding_attention\",\n", "\"chunked_attention\",\n"})),
              HasSubstr("layer_types holds 'chunked_attention'"));
  // mlp_bias says Wi and Wo have biases the checkpoint lacks.
  auto biased =
      LoadHfModel(Variant(kModernBert, "modernbert_bias",
                          {"\"mlp_bias\": false", "\"mlp_bias\": true"}),
                  {});
  EXPECT_FALSE(biased.ok());
  EXPECT_THAT(biased.status().message(), HasSubstr("layers.0.mlp.Wi.bias"));
}

constexpr char kNomicBert[] = "models/testdata/nomic_bert";

TEST(NomicBertTest, MatchesTransformersAndSentenceTransformers) {
  ExpectRotaryEncoderMatches(kNomicBert, kNomicBert, true);
}

// The fixture's pipeline is the folder sentence-transformers 6's save()
// wrote (its module types, pooling_mode, no max_seq_length): served with
// the embedding of MatchesTransformersAndSentenceTransformers, truncating
// where the tokenizer's model_max_length says.
TEST(NomicBertTest, ServesTheSentenceTransformers6Layout) {
  std::ifstream in(absl::StrCat(kNomicBert, "/modules.json"));
  std::stringstream modules;
  modules << in.rdbuf();
  EXPECT_THAT(modules.str(),
              HasSubstr("sentence_transformers.base.modules.transformer."
                        "Transformer"));
  auto model = LoadHfModel(kNomicBert, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "nomic_bert");
  EXPECT_EQ((*model)->max_sequence_length(), 64);
  std::vector<std::string> outputs;
  for (const TensorSpec& spec : (*model)->outputs())
    outputs.push_back(spec.name);
  EXPECT_THAT(outputs, ElementsAre("last_hidden_state", "sentence_embedding"));
}

// The hub's layout (fused Wqkv, fc11/fc12/fc2, norm1/norm2, emb_ln under
// encoder.layers) with its GPT-2-style config: the same model.
TEST(NomicBertTest, HubLayoutMatchesTransformers) {
  ExpectRotaryEncoderMatches(absl::StrCat(kNomicBert, "/fused"), kNomicBert,
                             false);
}

TEST(NomicBertTest, RefusesHubSwitchesItDoesNotCompute) {
  const std::string hub = absl::StrCat(kNomicBert, "/fused");
  EXPECT_THAT(LoadError(Variant(hub, "nomic_prenorm",
                                {"\"prenorm\": false", "\"prenorm\": true"})),
              HasSubstr("prenorm is true: not supported"));
  EXPECT_THAT(LoadError(Variant(hub, "nomic_scaling",
                                {"\"rotary_scaling_factor\": null",
                                 "\"rotary_scaling_factor\": 2.0"})),
              HasSubstr("rotary_scaling_factor is set"));
  EXPECT_THAT(LoadError(Variant(hub, "nomic_gelu",
                                {"\"activation_function\": \"swiglu\"",
                                 "\"activation_function\": \"gelu\""})),
              HasSubstr("activation_function 'gelu' is not supported"));
  EXPECT_THAT(LoadError(Variant(
                  hub, "nomic_disagree",
                  {"\"n_embd\": 32", "\"n_embd\": 32, \"hidden_size\": 64"})),
              HasSubstr("n_embd 32 disagrees with hidden_size 64"));
}

}  // namespace
}  // namespace castserve::models
