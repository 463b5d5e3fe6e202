// The decoder architectures added on the shared blocks, against fixtures
// transformers 5 wrote (tools/gen_decoder_fixtures.py): f32 logits under
// every residency, layerwise casting against the round-tripped reference,
// greedy generation under fp8 layerwise casting against transformers on the
// round-tripped weights (one sequence and continuously batched), bf16
// compute, the module tree, and the config errors of each. Greedy
// generation in f32 is checked with the other decoders in
// models/generation/generation_test.cc and
// models/generation/generation_scheduler_test.cc.
#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "casting/casting_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/decoder/decoder_model.h"
#include "models/generation/generation.h"
#include "models/generation/generation_scheduler.h"
#include "models/generation/incremental_decoder.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"
#include "platform/json_parser.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

class DecoderFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = "models/testdata/" + GetParam();
    auto reference =
        test_util::ReadSafetensors(folder_ + "/reference.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
    inputs_ = {{"input_ids", reference_.at("input.input_ids")},
               {"attention_mask", reference_.at("input.attention_mask")}};
  }

  std::unique_ptr<Model> Load(const WeightPolicyOptions& options) {
    auto model = LoadHfModel(folder_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }

  // The logits of the real (unpadded) tokens, [tokens, vocab].
  at::Tensor Real(const at::Tensor& logits) const {
    at::Tensor real =
        inputs_.at("attention_mask").flatten().nonzero().flatten();
    return logits.reshape({-1, logits.size(-1)}).index_select(0, real);
  }

  at::Tensor Logits(const WeightPolicyOptions& options) {
    std::unique_ptr<Model> model = Load(options);
    if (model == nullptr) return at::Tensor();
    auto outputs = model->Forward(inputs_);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    return outputs.ok() ? Real(outputs->at("logits")) : at::Tensor();
  }

  static WeightPolicyOptions Casting(const std::string& format,
                                     casting::ElementType compute) {
    auto storage = casting::StorageFormat::Parse(format);
    EXPECT_TRUE(storage.ok()) << storage.status();
    casting::CastingPolicy::Options policy;
    policy.storage_dtype = storage->element;
    policy.scaling = storage->scaling;
    policy.compute_dtype = compute;
    WeightPolicyOptions options;
    options.compute_copy = casting::ComputeCopyPolicy::kTransient;
    options.casting = *casting::CastingPolicy::Create(policy);
    return options;
  }

  std::string folder_;
  Tensors reference_;
  NamedTensors inputs_;
};

TEST_P(DecoderFixtureTest, F32MatchesTransformers) {
  const at::Tensor expected = Real(reference_.at("output.logits"));
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  WeightPolicyOptions streamed = mapped;
  streamed.compute_copy = casting::ComputeCopyPolicy::kTransient;
  streamed.prefetch = true;
  WeightPolicyOptions eager;
  eager.eager = true;
  for (const WeightPolicyOptions& options :
       {WeightPolicyOptions{}, mapped, streamed, eager}) {
    const double error = test_util::RelativeMaxError(Logits(options), expected);
    EXPECT_LE(error, 1e-4);
    std::cout << GetParam() << " f32 max rel error " << error << "\n";
  }
}

TEST_P(DecoderFixtureTest, LayerwiseCastingMatchesRoundTripReference) {
  for (const std::string& format : test_util::CastFormatNames()) {
    at::Tensor logits = Logits(Casting(format, casting::ElementType::kF32));
    const at::Tensor expected = Real(
        reference_.at(absl::StrCat("roundtrip.", format, ".output.logits")));
    const double error = test_util::RelativeMaxError(logits, expected);
    EXPECT_LE(error, 1e-4) << format;
    std::cout << GetParam() << " " << format << " max rel error vs roundtrip "
              << error << "\n";
  }
}

// The prompts and tokens of a generation reference file.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
ReadGenerations(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto json = platform::ParseJson(text.str());
  EXPECT_TRUE(json.ok()) << path << ": " << json.status();
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases;
  if (!json.ok()) return cases;
  for (const auto& item : json->at("cases")) {
    cases.emplace_back(item.at("prompt").get<std::vector<int64_t>>(),
                       item.at("generated").get<std::vector<int64_t>>());
  }
  return cases;
}

TEST_P(DecoderFixtureTest,
       Fp8GenerationEqualsTransformersOnRoundTrippedWeights) {
  const auto cases =
      ReadGenerations(folder_ + "/generation_reference.F8_E4M3FN_per_row.json");
  ASSERT_EQ(cases.size(), 2u);
  std::unique_ptr<Model> model =
      Load(Casting("F8_E4M3FN:per_row", casting::ElementType::kF32));
  ASSERT_NE(model, nullptr);
  // One sequence at a time over its KV cache.
  for (const auto& [prompt, expected] : cases) {
    GenerationOptions options;
    options.max_new_tokens = static_cast<int64_t>(expected.size());
    auto result = Generate(*model, prompt, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->tokens, expected) << "prompt of " << prompt.size();
  }
  // Both together through the scheduler (continuous batching).
  SchedulerOptions scheduler_options;
  scheduler_options.pool_bytes = 8 << 20;
  auto scheduler = GenerationScheduler::Create(*model, scheduler_options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  std::vector<absl::StatusOr<GenerationResult>> results(
      cases.size(), absl::UnknownError("not done"));
  std::vector<absl::Notification> done(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SequenceRequest request;
    request.prompt = cases[i].first;
    request.options.max_new_tokens =
        static_cast<int64_t>(cases[i].second.size());
    request.on_done = [&results, &done, i](absl::StatusOr<GenerationResult> r) {
      results[i] = std::move(r);
      done[i].Notify();
    };
    (*scheduler)->Submit(std::move(request));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(done[i].WaitForNotificationWithTimeout(absl::Seconds(120)));
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->tokens, cases[i].second) << "batched case " << i;
  }
}

TEST_P(DecoderFixtureTest, Bf16ComputeIsClose) {
  WeightPolicyOptions bf16;
  bf16.compute_dtype = casting::ElementType::kBF16;
  const double cosine = test_util::CosineSimilarity(
      Logits(bf16), Real(reference_.at("output.logits")));
  EXPECT_GE(cosine, 0.999);
  std::cout << GetParam() << " bf16 compute cosine " << cosine << "\n";
}

TEST_P(DecoderFixtureTest, RegistersAsAGeneratingArchitecture) {
  std::unique_ptr<Model> model = Load({});
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->architecture(), GetParam());
  EXPECT_NE(model->incremental_decoder(), nullptr);
  const std::vector<std::string> generative = GenerativeArchitectures();
  EXPECT_NE(std::find(generative.begin(), generative.end(), GetParam()),
            generative.end());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderFixtureTest,
                         ::testing::Values("qwen3", "gemma3_text", "phi3"));

std::map<std::string, std::string> Kinds(const std::string& fixture) {
  auto model = LoadHfModel("models/testdata/" + fixture, {});
  EXPECT_TRUE(model.ok()) << model.status();
  std::map<std::string, std::string> kinds;
  if (!model.ok()) return kinds;
  (*model)->root().Visit([&](Module& m) { kinds[m.name()] = m.kind(); });
  return kinds;
}

TEST(DecoderArchitecturesTest, ModulesCarryCheckpointNamesAndKinds) {
  auto qwen3 = Kinds("qwen3");
  EXPECT_EQ(qwen3["model.layers.1.self_attn.q_norm"], "RMSNorm");
  EXPECT_EQ(qwen3["model.layers.1.self_attn"], "Qwen3Attention");
  auto gemma = Kinds("gemma3_text");
  EXPECT_EQ(gemma["model.layers.2.post_feedforward_layernorm"],
            "Gemma3RMSNorm");
  EXPECT_EQ(gemma["model.layers.0.self_attn.k_norm"], "Gemma3RMSNorm");
  EXPECT_EQ(gemma["model.embed_tokens"], "Embedding");
  EXPECT_EQ(gemma["lm_head"], "Linear");  // Tied: no weight of its own.
  auto phi3 = Kinds("phi3");
  EXPECT_EQ(phi3["model.layers.0.self_attn.qkv_proj"], "Linear");
  EXPECT_EQ(phi3["model.layers.0.mlp.gate_up_proj"], "Linear");
  EXPECT_EQ(phi3["model.layers.0.mlp"], "Phi3MLP");
  EXPECT_EQ(phi3.count("model.layers.0.self_attn.q_proj"), 0u);
}

TEST(DecoderArchitecturesTest, PhiGenerationStaysWithinTheShortRope) {
  auto model = LoadHfModel("models/testdata/phi3", {});
  ASSERT_TRUE(model.ok()) << model.status();
  // original_max_position_embeddings: beyond it transformers recomputes the
  // cache with the long factors.
  EXPECT_EQ((*model)->incremental_decoder()->max_positions(), 64);
  EXPECT_EQ((*model)->max_sequence_length(), 256);
}

std::string SpecError(const std::string& json) {
  auto config = HfConfig::Parse(json, "config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return "";
  return std::string(ReadDecoderSpec(*config).status().message());
}

TEST(DecoderArchitecturesTest, ConfigErrorsNameTheField) {
  const std::string sizes = R"("vocab_size": 8, "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 2,
      "num_attention_heads": 2, "max_position_embeddings": 8)";
  EXPECT_THAT(SpecError(R"({"model_type": "gemma3_text", )" + sizes +
                        R"(, "use_bidirectional_attention": true})"),
              HasSubstr("use_bidirectional_attention"));
  EXPECT_THAT(SpecError(R"({"model_type": "qwen3", )" + sizes +
                        R"(, "use_sliding_window": true, "sliding_window": 4,
                        "layer_types": ["full_attention"]})"),
              HasSubstr("layer_types has 1 entries for 2 layers"));
  EXPECT_THAT(SpecError(R"({"model_type": "phi3", )" + sizes +
                        R"(, "original_max_position_embeddings": 4,
                        "rope_parameters": {"rope_type": "longrope",
                        "short_factor": [1.0], "long_factor": [1.0, 2.0]}})"),
              HasSubstr("short_factor and long_factor must have 2 entries"));
  EXPECT_THAT(SpecError(R"({"model_type": "qwen3", )" + sizes +
                        R"(, "rope_parameters": {"rope_type": "dynamic",
                        "factor": 2.0}})"),
              HasSubstr("unsupported rope_scaling type 'dynamic'"));
  EXPECT_THAT(SpecError(R"({"model_type": "bert", )" + sizes + "}"),
              HasSubstr("not a registered decoder"));
}

}  // namespace
}  // namespace castserve::models
