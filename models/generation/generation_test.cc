#include "models/generation/generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "casting/casting_policy.h"
#include "casting/memory/tracking_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/generation/incremental_decoder.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"
#include "platform/json_parser.h"

namespace castserve::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// One case of generation_reference.json
// (tools/gen_generation_references.py).
struct ReferenceCase {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 0;
  std::vector<int64_t> eos_token_ids;
  std::vector<int64_t> generated;
};

std::vector<ReferenceCase> ReadReference(const std::string& folder) {
  auto json =
      platform::ParseJson(ReadFile(folder + "/generation_reference.json"));
  EXPECT_TRUE(json.ok()) << json.status();
  std::vector<ReferenceCase> cases;
  if (!json.ok()) return cases;
  for (const auto& item : json->at("cases")) {
    cases.push_back({item.at("prompt").get<std::vector<int64_t>>(),
                     item.at("max_new_tokens").get<int64_t>(),
                     item.at("eos_token_ids").get<std::vector<int64_t>>(),
                     item.at("generated").get<std::vector<int64_t>>()});
  }
  return cases;
}

std::unique_ptr<Model> Load(const std::string& folder,
                            const WeightPolicyOptions& options = {}) {
  auto model = LoadHfModel(folder, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// The full forward's logits [seq, vocab] for `tokens`.
at::Tensor FullLogits(const Model& model, const std::vector<int64_t>& tokens) {
  at::Tensor ids = at::tensor(tokens, at::kLong).view({1, -1});
  auto outputs = model.Forward({{"input_ids", ids}});
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? outputs->at("logits")[0] : at::Tensor();
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

WeightPolicyOptions Fp8Transient() {
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = casting::ElementType::kF8E4M3FN;
  policy.scaling = casting::Scaling::kPerRow;
  policy.compute_dtype = casting::ElementType::kF32;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  return options;
}

class GenerationTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  }
  std::string folder() const { return "models/testdata/" + GetParam(); }
};

TEST_P(GenerationTest, GreedyEqualsTransformersTokenForToken) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const std::vector<ReferenceCase> cases = ReadReference(folder());
  ASSERT_EQ(cases.size(), 3u);
  for (const ReferenceCase& c : cases) {
    GenerationOptions options;
    options.max_new_tokens = c.max_new_tokens;
    options.eos_token_ids = c.eos_token_ids;
    auto result = Generate(*model, c.prompt, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->tokens, c.generated) << "prompt of " << c.prompt.size();
    EXPECT_EQ(result->stop, c.eos_token_ids.empty()
                                ? GenerationResult::Stop::kMaxNewTokens
                                : GenerationResult::Stop::kEos);
  }
  // Without EOS every reference produced all its tokens; with the forced
  // one, generation stopped at it.
  EXPECT_EQ(cases[0].generated.size(), 32u);
  EXPECT_EQ(cases[1].generated.size(), 32u);
  EXPECT_LT(cases[1].prompt.size(), 32u);
  EXPECT_NE(cases[0].prompt.size(), cases[1].prompt.size());
  EXPECT_EQ(cases[2].generated.back(), cases[2].eos_token_ids[0]);
}

TEST_P(GenerationTest, DecodeStepsEqualTheFullForward) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const ReferenceCase c = ReadReference(folder()).at(1);
  auto session = DecodeSession::Create(*model, 64);
  ASSERT_TRUE(session.ok()) << session.status();
  auto prefill = (*session)->Feed(c.prompt);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  EXPECT_LT(MaxAbsDiff(*prefill, FullLogits(*model, c.prompt)), 1e-5);
  std::vector<int64_t> tokens = c.prompt;
  for (int64_t token : c.generated) {
    tokens.push_back(token);
    auto step = (*session)->Feed({token});
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_EQ(step->size(0), 1);
    EXPECT_LT(MaxAbsDiff((*step)[0], FullLogits(*model, tokens)[-1]), 1e-5)
        << "at " << tokens.size() << " tokens";
  }
  EXPECT_EQ((*session)->length(), static_cast<int64_t>(tokens.size()));
}

TEST_P(GenerationTest, CacheBytesAreTheLayersKeysAndValues) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const KvCacheShape shape = model->incremental_decoder()->kv_cache_shape();
  GenerationOptions options;
  options.max_new_tokens = 7;
  auto result = Generate(*model, {3, 4, 5}, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens.size(), 7u);
  EXPECT_EQ(result->kv_cache_bytes,
            2 * shape.layers * shape.kv_heads * 10 * shape.head_dim * 4);
}

TEST_P(GenerationTest, Fp8LayerwiseCastingHoldsOneModuleAtATime) {
  std::unique_ptr<Model> model = Load(folder(), Fp8Transient());
  ASSERT_NE(model, nullptr);
  std::vector<int> holding;
  model->root().Visit([&holding](Module& module) {
    if (module.weights().empty()) return;
    module.AddPreForwardHook([&holding](const Module&, ForwardContext& ctx) {
      holding.push_back(ctx.modules_holding());
    });
  });
  const ReferenceCase c = ReadReference(folder()).at(0);
  GenerationOptions options;
  options.max_new_tokens = 16;
  ASSERT_TRUE(Generate(*model, c.prompt, options).ok());  // Resident copies.
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  const int64_t before = allocator->AllocatedBytes();
  holding.clear();
  auto result = Generate(*model, c.prompt, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens.size(), 16u);
  // Each step ran every module once (16 steps).
  ASSERT_FALSE(holding.empty());
  EXPECT_EQ(holding.size() % 16, 0u);
  EXPECT_LE(*std::max_element(holding.begin(), holding.end()), 1);
  // Transient copies and the cache are gone once generation returns.
  EXPECT_EQ(allocator->AllocatedBytes(), before);
}

TEST_P(GenerationTest, ConcurrentGenerationsOfOneModelAgree) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const std::vector<ReferenceCase> cases = ReadReference(folder());
  std::vector<absl::StatusOr<GenerationResult>> results(
      4, absl::UnknownError("not run"));
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < results.size(); ++i) {
      threads.emplace_back([&, i] {
        const ReferenceCase& c = cases[i % 2];
        GenerationOptions options;
        options.max_new_tokens = c.max_new_tokens;
        results[i] = Generate(*model, c.prompt, options);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->tokens, cases[i % 2].generated) << i;
  }
}

GenerationOptions Sampled(int64_t max_new_tokens, uint64_t seed) {
  GenerationOptions options;
  options.max_new_tokens = max_new_tokens;
  options.sampling.temperature = 1;
  options.sampling.seed = seed;
  return options;
}

TEST_P(GenerationTest, SampledTokensDependOnlyOnTheSeed) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const std::vector<int64_t> prompt = ReadReference(folder()).at(0).prompt;
  auto first = Generate(*model, prompt, Sampled(16, 1));
  auto again = Generate(*model, prompt, Sampled(16, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(first->tokens, again->tokens);
  // Another seed draws other tokens (for at least one of several).
  bool differs = false;
  for (uint64_t seed = 2; seed < 6; ++seed) {
    auto other = Generate(*model, prompt, Sampled(16, seed));
    ASSERT_TRUE(other.ok()) << other.status();
    differs = differs || other->tokens != first->tokens;
  }
  EXPECT_TRUE(differs);
  // Concurrent sequences with their own seeds draw what they draw alone.
  std::vector<absl::StatusOr<GenerationResult>> results(
      4, absl::UnknownError("not run"));
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < results.size(); ++i) {
      threads.emplace_back([&, i] {
        results[i] = Generate(*model, prompt, Sampled(16, 1 + i % 2));
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  auto second = Generate(*model, prompt, Sampled(16, 2));
  ASSERT_TRUE(second.ok()) << second.status();
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->tokens, i % 2 == 0 ? first->tokens : second->tokens)
        << i;
  }
}

TEST_P(GenerationTest, TopKOneAndTinyTopPEqualGreedy) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  for (const ReferenceCase& c : ReadReference(folder())) {
    GenerationOptions options = Sampled(c.max_new_tokens, 3);
    options.eos_token_ids = c.eos_token_ids;
    options.sampling.temperature = 1.5;
    options.sampling.top_k = 1;
    auto top_k = Generate(*model, c.prompt, options);
    ASSERT_TRUE(top_k.ok()) << top_k.status();
    EXPECT_EQ(top_k->tokens, c.generated);
    options.sampling.top_k = 0;
    options.sampling.top_p = 1e-9;
    auto top_p = Generate(*model, c.prompt, options);
    ASSERT_TRUE(top_p.ok()) << top_p.status();
    EXPECT_EQ(top_p->tokens, c.generated);
  }
}

TEST_P(GenerationTest, StopTokenIdsStopGeneration) {
  std::unique_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const ReferenceCase c = ReadReference(folder()).at(0);
  const int64_t stop = c.generated[5];
  const auto first = std::find(c.generated.begin(), c.generated.end(), stop);
  GenerationOptions options;
  options.max_new_tokens = c.max_new_tokens;
  options.stop_token_ids = {stop};
  auto result = Generate(*model, c.prompt, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens,
            std::vector<int64_t>(c.generated.begin(), first + 1));
  EXPECT_EQ(result->stop, GenerationResult::Stop::kStopToken);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerationTest,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3",
                                           "gemma3_text", "phi3"));

TEST(GenerationSlidingWindowTest, DecodeStepsHonourMistralsWindow) {
  // The mistral fixture with a window of 6 tokens, shorter than the
  // sequence: the decode steps' logits still equal the full forward's
  // (which the window changes: checked against the unlimited model).
  const std::string dir = test_util::MakeScratchDir("generation_window");
  std::filesystem::copy_file("models/testdata/mistral/model.safetensors",
                             dir + "/model.safetensors");
  std::string config = ReadFile("models/testdata/mistral/config.json");
  const std::string key = "\"sliding_window\": 4096";
  ASSERT_NE(config.find(key), std::string::npos);
  config.replace(config.find(key), key.size(), "\"sliding_window\": 6");
  std::ofstream(dir + "/config.json") << config;
  std::unique_ptr<Model> windowed = Load(dir);
  std::unique_ptr<Model> unlimited = Load("models/testdata/mistral");
  ASSERT_NE(windowed, nullptr);
  ASSERT_NE(unlimited, nullptr);
  const ReferenceCase c = ReadReference("models/testdata/mistral").at(1);
  std::vector<int64_t> tokens = c.prompt;
  tokens.insert(tokens.end(), c.generated.begin(), c.generated.begin() + 8);
  EXPECT_GT(MaxAbsDiff(FullLogits(*windowed, tokens)[-1],
                       FullLogits(*unlimited, tokens)[-1]),
            1e-3);
  auto session = DecodeSession::Create(*windowed, 64);
  ASSERT_TRUE(session.ok());
  std::vector<int64_t> fed(c.prompt);
  ASSERT_TRUE((*session)->Feed(c.prompt).ok());
  for (int i = 0; i < 8; ++i) {
    fed.push_back(c.generated[i]);
    auto step = (*session)->Feed({c.generated[i]});
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LT(MaxAbsDiff((*step)[0], FullLogits(*windowed, fed)[-1]), 1e-5);
  }
}

TEST(GenerationEosTest, ReadsEosFromTheFolder) {
  auto eos = ReadEosTokenIds("models/testdata/llama");
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_THAT(*eos, ElementsAre(2));
  const std::string dir = test_util::MakeScratchDir("generation_eos");
  std::ofstream(dir + "/config.json") << R"({"eos_token_id": [5, 7]})";
  eos = ReadEosTokenIds(dir);
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_THAT(*eos, ElementsAre(5, 7));
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": 9})";
  eos = ReadEosTokenIds(dir);
  ASSERT_TRUE(eos.ok()) << eos.status();
  EXPECT_THAT(*eos, ElementsAre(9));
}

TEST(GenerationInputsTest, BadInputsAreInvalidArgument) {
  std::unique_ptr<Model> model = Load("models/testdata/llama");
  ASSERT_NE(model, nullptr);  // 128 positions, vocabulary of 256.
  auto error = [&](std::vector<int64_t> prompt, int64_t max_new_tokens) {
    GenerationOptions options;
    options.max_new_tokens = max_new_tokens;
    auto result = Generate(*model, prompt, options);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(result.status().message());
  };
  EXPECT_THAT(error({3}, 0), HasSubstr("max_new_tokens is 0"));
  EXPECT_THAT(error({3}, -1), HasSubstr("max_new_tokens is -1"));
  EXPECT_THAT(error({3}, kMaxNewTokens + 1), HasSubstr("max_new_tokens"));
  EXPECT_THAT(error({3}, 128), HasSubstr("exceeds the model's 128 positions"));
  EXPECT_THAT(error({}, 4), HasSubstr("prompt is empty"));
  EXPECT_THAT(error(std::vector<int64_t>(129, 3), 1),
              HasSubstr("129 tokens, more than the model's 128 positions"));
  EXPECT_THAT(error({3, 256}, 1), HasSubstr("token id 256"));
  EXPECT_THAT(error({-1}, 1), HasSubstr("token id -1"));
  // The whole table is usable.
  GenerationOptions fill;
  fill.max_new_tokens = 1;
  EXPECT_TRUE(Generate(*model, std::vector<int64_t>(127, 3), fill).ok());
}

TEST(GenerationInputsTest, BadSamplingParamsAreInvalidArgument) {
  std::unique_ptr<Model> model = Load("models/testdata/llama");
  ASSERT_NE(model, nullptr);
  auto error = [&](auto field, auto value) {
    GenerationOptions options;
    options.max_new_tokens = 4;
    options.sampling.*field = value;
    auto result = Generate(*model, {3}, options);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(result.status().message());
  };
  EXPECT_THAT(error(&SamplingParams::temperature, -1.0),
              HasSubstr("temperature is -1"));
  EXPECT_THAT(error(&SamplingParams::top_k, int64_t{-2}),
              HasSubstr("top_k is -2"));
  EXPECT_THAT(error(&SamplingParams::top_p, 0.0), HasSubstr("top_p is 0"));
  EXPECT_THAT(error(&SamplingParams::repetition_penalty, 0.0),
              HasSubstr("repetition_penalty is 0"));
}

TEST(GenerationInputsTest, CancelledGenerationStops) {
  std::unique_ptr<Model> model = Load("models/testdata/llama");
  ASSERT_NE(model, nullptr);
  Cancellation cancellation;
  cancellation.Cancel("test");
  GenerationOptions options;
  options.max_new_tokens = 4;
  auto result = Generate(*model, {3, 4}, options, &cancellation);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  // A session fed under a cancelled flag stops at the first module.
  auto session = DecodeSession::Create(*model, 8);
  ASSERT_TRUE(session.ok());
  EXPECT_EQ((*session)->Feed({3}, &cancellation).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(GenerationInputsTest, ModelsWithoutDecoderCannotGenerate) {
  std::unique_ptr<Model> model = Load("models/testdata/bert");
  ASSERT_NE(model, nullptr);
  GenerationOptions options;
  options.max_new_tokens = 1;
  auto result = Generate(*model, {3}, options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("cannot generate"));
}

}  // namespace
}  // namespace castserve::models
