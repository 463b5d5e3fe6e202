// Generation models through the factory with the real scheduler: the llama
// fixture's greedy references through the unary and the streaming path, text
// in and out with a tokenizer (a llama checkpoint made in the test for
// text/testdata's bpe-llama2 vocabulary), limits, cancellation and the KV
// bytes.
#include <ATen/ATen.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "models/test_util/tensor_files.h"
#include "platform/json_parser.h"
#include "server/lifecycle/served_model.h"
#include "server/servables/factory/hf_served_model_factory.h"
#include "text/tokenizer.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

constexpr char kLlamaFolder[] = "models/testdata/llama";
constexpr char kLlama2Tokenizer[] = "text/testdata/bpe-llama2/tokenizer.json";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A repository folder holding model `name` whose checkpoint is `folder`.
std::string ModelDirFor(const std::string& name, const std::string& folder) {
  const fs::path repository = models::test_util::MakeScratchDir(name);
  const fs::path model_dir = repository / name;
  fs::create_directories(model_dir);
  fs::create_directory_symlink(fs::absolute(folder), model_dir / "hf");
  return model_dir.string();
}

inference::ModelConfig GenerationConfig(const std::string& name) {
  inference::ModelConfig config;
  config.set_name(name);
  config.mutable_checkpoint()->set_path("hf");
  config.mutable_generation()->set_kv_cache_bytes(int64_t{4} << 20);
  config.mutable_generation()->set_kv_block_tokens(8);
  return config;
}

absl::StatusOr<std::shared_ptr<ServedModel>> Load(
    const std::string& folder, const inference::ModelConfig& config) {
  FactoryOptions options;
  options.allow_symlinks_outside_repository = true;  // Runfiles are links.
  HfServedModelFactory factory(options);
  return factory.Create(ModelDirFor(config.name(), folder), config, nullptr);
}

inference::ModelInferRequest IdsRequest(const std::vector<int64_t>& ids,
                                        int64_t max_tokens) {
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT64");
  input->add_shape(static_cast<int64_t>(ids.size()));
  for (int64_t id : ids) input->mutable_contents()->add_int64_contents(id);
  (*request.mutable_parameters())["max_tokens"].set_int64_param(max_tokens);
  return request;
}

inference::ModelInferRequest TextRequest(const std::string& text,
                                         int64_t max_tokens) {
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name("text_input");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(text);
  (*request.mutable_parameters())["max_tokens"].set_int64_param(max_tokens);
  return request;
}

struct Outcome {
  absl::Status status;
  std::vector<inference::ModelInferResponse> partials;
  inference::ModelInferResponse final_response;
};

Outcome Call(ServedModel& model, const inference::ModelInferRequest& request,
             bool stream, std::function<bool()> is_cancelled = nullptr,
             std::function<void(int)> on_partial = nullptr) {
  Outcome outcome;
  absl::Notification done;
  InferenceCall call;
  call.request = &request;
  call.response = &outcome.final_response;
  call.is_cancelled = std::move(is_cancelled);
  if (stream) {
    call.partial_response = [&outcome,
                             on_partial](inference::ModelInferResponse part) {
      outcome.partials.push_back(std::move(part));
      if (on_partial) on_partial(static_cast<int>(outcome.partials.size()));
    };
  }
  model.Infer(std::move(call), [&](absl::Status status) {
    outcome.status = status;
    done.Notify();
  });
  done.WaitForNotification();
  return outcome;
}

const std::string* Raw(const inference::ModelInferResponse& response,
                       const std::string& name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) {
      return &response.raw_output_contents(i);
    }
  }
  return nullptr;
}

std::vector<int64_t> Ids(const inference::ModelInferResponse& response) {
  const std::string* raw = Raw(response, "output_ids");
  if (raw == nullptr) return {};
  std::vector<int64_t> ids(raw->size() / sizeof(int64_t));
  std::memcpy(ids.data(), raw->data(), raw->size());
  return ids;
}

std::string Text(const inference::ModelInferResponse& response) {
  const std::string* raw = Raw(response, "text_output");
  return raw == nullptr ? "" : raw->substr(4);
}

std::string FinishReason(const inference::ModelInferResponse& response) {
  auto it = response.parameters().find("finish_reason");
  return it == response.parameters().end() ? "" : it->second.string_param();
}

// The ids a stream delivered, one per response.
std::vector<int64_t> StreamedIds(const Outcome& outcome) {
  std::vector<int64_t> ids;
  for (const auto& part : outcome.partials) {
    const std::vector<int64_t> one = Ids(part);
    EXPECT_EQ(one.size(), 1u);
    ids.insert(ids.end(), one.begin(), one.end());
  }
  const std::vector<int64_t> last = Ids(outcome.final_response);
  ids.insert(ids.end(), last.begin(), last.end());
  return ids;
}

template <typename T>
std::vector<T> Values(const inference::ModelInferResponse& response,
                      const std::string& name) {
  const std::string* raw = Raw(response, name);
  if (raw == nullptr) return {};
  std::vector<T> values(raw->size() / sizeof(T));
  std::memcpy(values.data(), raw->data(), raw->size());
  return values;
}

// The elements of a BYTES output, in order.
std::vector<std::string> Strings(const inference::ModelInferResponse& response,
                                 const std::string& name) {
  const std::string* raw = Raw(response, name);
  std::vector<std::string> strings;
  for (size_t at = 0; raw != nullptr && at + 4 <= raw->size();) {
    uint32_t length = 0;
    std::memcpy(&length, raw->data() + at, 4);
    strings.push_back(raw->substr(at + 4, length));
    at += 4 + length;
  }
  return strings;
}

std::vector<int64_t> Shape(const inference::ModelInferResponse& response,
                           const std::string& name) {
  for (const auto& output : response.outputs()) {
    if (output.name() == name) {
      return std::vector<int64_t>(output.shape().begin(), output.shape().end());
    }
  }
  return {};
}

std::string StreamedText(const Outcome& outcome) {
  std::string text;
  for (const auto& part : outcome.partials) text += Text(part);
  return text + Text(outcome.final_response);
}

TEST(GenerationLlamaTest, GreedyIdsEqualTheReferenceUnaryAndStreamed) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(kLlamaFolder, GenerationConfig("llama"));
  ASSERT_TRUE(model.ok()) << model.status();
  const inference::ModelConfig& config = (*model)->config();
  EXPECT_TRUE(config.model_transaction_policy().decoupled());
  EXPECT_EQ(config.max_batch_size(), 0);
  absl::StatusOr<nlohmann::json> reference = platform::ParseJson(
      ReadFile(std::string(kLlamaFolder) + "/generation_reference.json"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  int cases = 0;
  for (const auto& item : reference->at("cases")) {
    const auto prompt = item.at("prompt").get<std::vector<int64_t>>();
    const auto eos = item.at("eos_token_ids").get<std::vector<int64_t>>();
    const auto expected = item.at("generated").get<std::vector<int64_t>>();
    inference::ModelInferRequest request =
        IdsRequest(prompt, item.at("max_new_tokens").get<int64_t>());
    // The reference's EOS ids, not the checkpoint's.
    (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
    if (!eos.empty()) {
      nlohmann::json ids = eos;
      (*request.mutable_parameters())["stop_token_ids"].set_string_param(
          ids.dump());
    }
    const Outcome unary = Call(**model, request, /*stream=*/false);
    ASSERT_TRUE(unary.status.ok()) << unary.status;
    EXPECT_EQ(Ids(unary.final_response), expected) << "case " << cases;
    EXPECT_EQ(FinishReason(unary.final_response),
              eos.empty() ? "length" : "stop");
    const Outcome streamed = Call(**model, request, /*stream=*/true);
    ASSERT_TRUE(streamed.status.ok()) << streamed.status;
    EXPECT_EQ(streamed.partials.size() + 1, expected.size());
    EXPECT_EQ(StreamedIds(streamed), expected) << "case " << cases;
    ++cases;
  }
  EXPECT_EQ(cases, 3);
  const ServedModelStatistics stats = (*model)->statistics();
  EXPECT_EQ(stats.success_count, 6u);
  EXPECT_EQ(stats.fail_count, 0u);
  EXPECT_EQ(stats.generated_tokens, 2u * (32 + 32 + 10));
}

// output_logprobs / output_top_ids / output_top_logprobs against
// transformers' log_softmax (tools/gen_logprob_references.py), unary and
// one token per streamed response; only when asked.
TEST(GenerationLlamaTest, LogprobOutputsEqualTransformersUnaryAndStreamed) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(kLlamaFolder, GenerationConfig("llama_logprobs"));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<nlohmann::json> reference = platform::ParseJson(
      ReadFile(std::string(kLlamaFolder) + "/logprobs_reference.json"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  const int64_t top = reference->at("top").get<int64_t>();
  const nlohmann::json& item = reference->at("logprob_cases")[0];
  const nlohmann::json& steps = item.at("steps");
  const int64_t n = static_cast<int64_t>(steps.size());
  inference::ModelInferRequest request =
      IdsRequest(item.at("prompt").get<std::vector<int64_t>>(), n);
  (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
  (*request.mutable_parameters())["logprobs"].set_bool_param(true);
  (*request.mutable_parameters())["top_logprobs"].set_int64_param(top);
  auto expect_steps =
      [&](const std::vector<inference::ModelInferResponse*>& responses) {
        int64_t step = 0;
        for (const inference::ModelInferResponse* response : responses) {
          const std::vector<float> logprobs =
              Values<float>(*response, "output_logprobs");
          const std::vector<int64_t> top_ids =
              Values<int64_t>(*response, "output_top_ids");
          const std::vector<float> top_logprobs =
              Values<float>(*response, "output_top_logprobs");
          const int64_t count = static_cast<int64_t>(Ids(*response).size());
          ASSERT_EQ(static_cast<int64_t>(logprobs.size()), count);
          EXPECT_EQ(Shape(*response, "output_top_ids"),
                    (std::vector<int64_t>{count, top}));
          ASSERT_EQ(static_cast<int64_t>(top_ids.size()), count * top);
          ASSERT_EQ(static_cast<int64_t>(top_logprobs.size()), count * top);
          for (int64_t i = 0; i < count; ++i, ++step) {
            const nlohmann::json& expected = steps[step];
            EXPECT_NEAR(logprobs[i], expected.at("logprob").get<double>(), 1e-4)
                << "step " << step;
            for (int64_t k = 0; k < top; ++k) {
              EXPECT_EQ(top_ids[i * top + k], expected.at("top_ids")[k])
                  << "step " << step;
              EXPECT_NEAR(top_logprobs[i * top + k],
                          expected.at("top_logprobs")[k].get<double>(), 1e-4);
            }
          }
        }
        EXPECT_EQ(step, n);
      };
  Outcome unary = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(unary.status.ok()) << unary.status;
  expect_steps({&unary.final_response});
  Outcome streamed = Call(**model, request, /*stream=*/true);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status;
  std::vector<inference::ModelInferResponse*> responses;
  for (auto& part : streamed.partials) responses.push_back(&part);
  responses.push_back(&streamed.final_response);
  expect_steps(responses);

  // Not asked: no such output; top_logprobs 0: the chosen ones only.
  request.mutable_parameters()->erase("top_logprobs");
  Outcome chosen = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(chosen.status.ok()) << chosen.status;
  EXPECT_EQ(Values<float>(chosen.final_response, "output_logprobs").size(),
            static_cast<size_t>(n));
  EXPECT_EQ(Raw(chosen.final_response, "output_top_ids"), nullptr);
  request.mutable_parameters()->erase("logprobs");
  Outcome plain = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  EXPECT_EQ(Raw(plain.final_response, "output_logprobs"), nullptr);
  // Naming a log-probability output without asking for it is refused.
  request.add_outputs()->set_name("output_top_logprobs");
  Outcome refused = Call(**model, request, /*stream=*/false);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status.message().find("logprobs"), std::string::npos)
      << refused.status;
}

// presence_penalty and frequency_penalty reach the sampler: greedy output
// equals the reference's for each case.
TEST(GenerationLlamaTest, PenaltiesChangeGreedyAsTheReferenceSays) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(kLlamaFolder, GenerationConfig("llama_penalties"));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<nlohmann::json> reference = platform::ParseJson(
      ReadFile(std::string(kLlamaFolder) + "/logprobs_reference.json"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const auto& item : reference->at("penalty_cases")) {
    inference::ModelInferRequest request =
        IdsRequest(reference->at("penalty_prompt").get<std::vector<int64_t>>(),
                   reference->at("penalty_max_new_tokens").get<int64_t>());
    auto& parameters = *request.mutable_parameters();
    parameters["ignore_eos"].set_bool_param(true);
    parameters["presence_penalty"].set_double_param(
        item.at("presence_penalty").get<double>());
    parameters["frequency_penalty"].set_double_param(
        item.at("frequency_penalty").get<double>());
    parameters["repetition_penalty"].set_double_param(
        item.at("repetition_penalty").get<double>());
    const Outcome outcome = Call(**model, request, /*stream=*/false);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    EXPECT_EQ(Ids(outcome.final_response),
              item.at("generated").get<std::vector<int64_t>>())
        << item.dump();
  }
  inference::ModelInferRequest bad = IdsRequest({3, 4}, 2);
  (*bad.mutable_parameters())["frequency_penalty"].set_double_param(-2.5);
  const Outcome refused = Call(**model, bad, /*stream=*/false);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status.message().find("frequency_penalty"),
            std::string::npos);
}

TEST(GenerationLlamaTest, LimitsOfTheContextAreInvalidArgument) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(kLlamaFolder, GenerationConfig("llama_limits"));
  ASSERT_TRUE(model.ok()) << model.status();
  // The fixture's position table holds 128 tokens.
  const std::vector<int64_t> full(128, 5);
  EXPECT_EQ(Call(**model, IdsRequest(full, 1), false).status.code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> long_prompt(120, 5);
  EXPECT_EQ(Call(**model, IdsRequest(long_prompt, 9), false).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Call(**model, IdsRequest(long_prompt, 8), false).status.ok());
  EXPECT_EQ(Call(**model, IdsRequest({5, 6}, 0), false).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Call(**model, IdsRequest({256}, 1), false).status.code(),
            absl::StatusCode::kInvalidArgument);
  // No tokenizer in the fixture: ids only.
  EXPECT_EQ(Call(**model, TextRequest("hi", 1), false).status.code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GenerationLlamaTest, CancellingAStreamFreesItsKvBytes) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(kLlamaFolder, GenerationConfig("llama_cancel"));
  ASSERT_TRUE(model.ok()) << model.status();
  // The whole pool counts in the budget from load on.
  EXPECT_GE((*model)->tracked_bytes(), int64_t{4} << 20);
  std::atomic<bool> cancelled{false};
  int64_t kv_while_running = 0;
  const Outcome outcome = Call(
      **model, IdsRequest({1, 2, 3}, 100), /*stream=*/true,
      [&] { return cancelled.load(); },
      [&](int parts) {
        if (parts == 3) {
          kv_while_running = (*model)->activity().kv_cache->bytes;
          cancelled = true;
        }
      });
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_GT(kv_while_running, 0);
  EXPECT_LT(outcome.partials.size(), 100u);
  const ServedModelActivity after = (*model)->activity();
  EXPECT_EQ(after.kv_cache->bytes, 0);
  EXPECT_GE(after.kv_cache->peak_bytes, kv_while_running);
}

// A demotion while a sequence runs waits for the step in flight, frees the
// weights between two steps and keeps the sequence's KV blocks: the
// sequence goes on to the same tokens, and so does a later request.
TEST(GenerationLlamaTest, DemotingWhileASequenceRunsKeepsItsTokens) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(kLlamaFolder, GenerationConfig("llama_tiers"));
  ASSERT_TRUE(model.ok()) << model.status();
  inference::ModelInferRequest request = IdsRequest({1, 2, 3}, 40);
  (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
  const Outcome hot = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(hot.status.ok()) << hot.status;
  const std::vector<int64_t> expected = Ids(hot.final_response);
  ASSERT_EQ(expected.size(), 40u);

  std::thread demotion;
  absl::Status demoted = absl::UnknownError("not run");
  const Outcome streamed =
      Call(**model, request, /*stream=*/true, nullptr, [&](int parts) {
        // Not on the step thread: the move waits for its step to end.
        if (parts == 3) {
          demotion = std::thread(
              [&] { demoted = (*model)->MoveTo(casting::WeightTier::kCool); });
        }
      });
  demotion.join();
  ASSERT_TRUE(demoted.ok()) << demoted;
  ASSERT_TRUE(streamed.status.ok()) << streamed.status;
  EXPECT_EQ(StreamedIds(streamed), expected);
  EXPECT_EQ((*model)->tier(), casting::WeightTier::kCool);

  ASSERT_TRUE((*model)->MoveTo(casting::WeightTier::kHot).ok());
  const Outcome again = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(Ids(again.final_response), expected);
}

// The cool tier holds no KV pool: the projection leaves it out, and a move
// there frees the blocks the idle pool kept (the prefix cache's too).
TEST(GenerationLlamaTest, TheCoolTierFreesTheIdleKvPool) {
  const inference::ModelConfig config = GenerationConfig("llama_cool_kv");
  const std::string model_dir = ModelDirFor(config.name(), kLlamaFolder);
  FactoryOptions options;
  options.allow_symlinks_outside_repository = true;
  HfServedModelFactory factory(options);
  absl::StatusOr<TierBytes> tiers =
      factory.ProjectedTierBytes(model_dir, config);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_GE(tiers->warm - tiers->cool, int64_t{4} << 20);
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(model_dir, config, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const inference::ModelInferRequest request = IdsRequest({1, 2, 3, 4}, 30);
  const Outcome hot = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(hot.status.ok()) << hot.status;
  ASSERT_GT((*model)->activity().kv_cache->prefix_cached_bytes, 0);
  const int64_t hot_bytes = (*model)->tracked_bytes();
  EXPECT_GE(hot_bytes, int64_t{4} << 20) << "the whole pool counts";

  ASSERT_TRUE((*model)->MoveTo(casting::WeightTier::kCool).ok());
  EXPECT_EQ((*model)->activity().kv_cache->prefix_cached_bytes, 0);
  EXPECT_LE((*model)->tracked_bytes(), hot_bytes - (int64_t{4} << 20));

  ASSERT_TRUE((*model)->MoveTo(casting::WeightTier::kHot).ok());
  EXPECT_GE((*model)->tracked_bytes(), int64_t{4} << 20) << "reserved again";
  const Outcome again = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(Ids(again.final_response), Ids(hot.final_response));
}

TEST(GenerationLlamaTest, PrefixCachingIsOnUnlessTheConfigDisablesIt) {
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 20; ++i) prompt.push_back(3 + (5 * i) % 200);
  for (const bool disabled : {false, true}) {
    inference::ModelConfig config = GenerationConfig(
        disabled ? "llama_no_prefix_cache" : "llama_prefix_cache");
    config.mutable_generation()->set_disable_prefix_caching(disabled);
    absl::StatusOr<std::shared_ptr<ServedModel>> model =
        Load(kLlamaFolder, config);
    ASSERT_TRUE(model.ok()) << model.status();
    const Outcome first = Call(**model, IdsRequest(prompt, 3), false);
    const Outcome again = Call(**model, IdsRequest(prompt, 3), false);
    ASSERT_TRUE(first.status.ok()) << first.status;
    ASSERT_TRUE(again.status.ok()) << again.status;
    EXPECT_EQ(Ids(first.final_response), Ids(again.final_response));
    const ServedModelActivity::KvCache kv = *(*model)->activity().kv_cache;
    // Blocks of 8: the second prompt reuses the 2 whole blocks before its
    // last token.
    EXPECT_EQ(kv.prefix_hit_tokens, disabled ? 0 : 16) << disabled;
    EXPECT_EQ(kv.prefix_miss_tokens, disabled ? 0 : 24) << disabled;
    EXPECT_EQ(kv.prefix_cached_bytes > 0, !disabled) << disabled;
    EXPECT_EQ(kv.bytes, 0);
  }
}

TEST(GenerationLlamaTest, AnotherArchitectureWithGenerationIsRefused) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load("models/testdata/bert", GenerationConfig("bert_gen"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("generation"), std::string::npos)
      << model.status();
}

// A llama checkpoint for bpe-llama2's vocabulary: the fixture's layers with
// seeded random embeddings and head of its size, and its tokenizer.json.
std::string MakeTokenizerLlama() {
  const std::string folder =
      models::test_util::MakeScratchDir("llama_with_tokenizer");
  std::map<std::string, at::Tensor> tensors;
  for (const char* shard : {"model-00001-of-00002.safetensors",
                            "model-00002-of-00002.safetensors"}) {
    auto read = models::test_util::ReadSafetensors(std::string(kLlamaFolder) +
                                                   "/" + shard);
    EXPECT_TRUE(read.ok()) << read.status();
    if (read.ok()) tensors.insert(read->begin(), read->end());
  }
  at::manual_seed(17);
  const int64_t vocab = 1756;
  tensors["model.embed_tokens.weight"] = at::randn({vocab, 64});
  tensors["lm_head.weight"] = at::randn({vocab, 64}) * 0.5;
  EXPECT_TRUE(models::test_util::WriteSafetensors(folder + "/model.safetensors",
                                                  tensors)
                  .ok());
  std::string config = ReadFile(std::string(kLlamaFolder) + "/config.json");
  const std::string from = "\"vocab_size\": 256";
  config.replace(config.find(from), from.size(), "\"vocab_size\": 1756");
  std::ofstream(folder + "/config.json") << config;
  fs::copy_file(std::string(kLlamaFolder) + "/generation_config.json",
                folder + "/generation_config.json");
  fs::copy_file(kLlama2Tokenizer, folder + "/tokenizer.json");
  return folder;
}

TEST(GenerationLlamaTest, TextInTextOutStreamedAndStopStrings) {
  const std::string folder = MakeTokenizerLlama();
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(folder, GenerationConfig("llama_text"));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->config().input(0).name(), "text_input");
  inference::ModelInferRequest request = TextRequest("Hello world", 24);
  (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
  const Outcome unary = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(unary.status.ok()) << unary.status;
  const std::vector<int64_t> ids = Ids(unary.final_response);
  ASSERT_EQ(ids.size(), 24u);
  auto tokenizer = text::LoadTokenizer(folder);
  ASSERT_TRUE(tokenizer.ok());
  const std::string text = Text(unary.final_response);
  EXPECT_EQ(text, *(*tokenizer)->Decode(ids, /*skip_special_tokens=*/true));
  ASSERT_GE(text.size(), 8u) << text;

  const Outcome streamed = Call(**model, request, /*stream=*/true);
  ASSERT_TRUE(streamed.status.ok());
  EXPECT_EQ(StreamedIds(streamed), ids);
  EXPECT_EQ(StreamedText(streamed), text);

  // A stop string of text from the middle: most likely across a token
  // boundary; the text ends before its first appearance.
  const std::string stop = text.substr(text.size() / 2, 3);
  const std::string before = text.substr(0, text.find(stop));
  (*request.mutable_parameters())["stop"].set_string_param(stop);
  const Outcome stopped_unary = Call(**model, request, /*stream=*/false);
  ASSERT_TRUE(stopped_unary.status.ok());
  EXPECT_EQ(Text(stopped_unary.final_response), before) << "stop " << stop;
  EXPECT_EQ(FinishReason(stopped_unary.final_response), "stop");
  EXPECT_LT(Ids(stopped_unary.final_response).size(), ids.size());
  const Outcome stopped_stream = Call(**model, request, /*stream=*/true);
  ASSERT_TRUE(stopped_stream.status.ok());
  EXPECT_EQ(StreamedText(stopped_stream), before);
}

// With a tokenizer the log-probability outputs carry each token decoded
// alone, and its alternatives'.
TEST(GenerationLlamaTest, LogprobTokensAreEachIdDecodedAlone) {
  const std::string folder = MakeTokenizerLlama();
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      Load(folder, GenerationConfig("llama_text_logprobs"));
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = text::LoadTokenizer(folder);
  ASSERT_TRUE(tokenizer.ok());
  inference::ModelInferRequest request = TextRequest("Hello world", 6);
  (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
  (*request.mutable_parameters())["logprobs"].set_bool_param(true);
  (*request.mutable_parameters())["top_logprobs"].set_int64_param(2);
  for (bool stream : {false, true}) {
    const Outcome outcome = Call(**model, request, stream);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    std::vector<const inference::ModelInferResponse*> responses;
    for (const auto& part : outcome.partials) responses.push_back(&part);
    responses.push_back(&outcome.final_response);
    size_t tokens = 0;
    for (const inference::ModelInferResponse* response : responses) {
      const std::vector<int64_t> ids = Ids(*response);
      const std::vector<int64_t> top_ids =
          Values<int64_t>(*response, "output_top_ids");
      const std::vector<std::string> texts =
          Strings(*response, "output_tokens");
      const std::vector<std::string> top_texts =
          Strings(*response, "output_top_tokens");
      ASSERT_EQ(texts.size(), ids.size());
      ASSERT_EQ(top_texts.size(), 2 * ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(texts[i], *(*tokenizer)->Decode({ids[i]}, false));
        for (size_t k = 0; k < 2; ++k) {
          EXPECT_EQ(top_texts[2 * i + k],
                    *(*tokenizer)->Decode({top_ids[2 * i + k]}, false));
        }
      }
      tokens += ids.size();
    }
    EXPECT_EQ(tokens, 6u) << "stream " << stream;
  }
}

}  // namespace
}  // namespace castserve
