#include "server/servables/generation/generation_served_model.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/test_util/byte_tokenizer.h"
#include "server/test_util/fake_generation_engine.h"

namespace castserve {
namespace {

using test_util::ByteIds;
using test_util::ByteTokenizer;
using test_util::FakeGenerationEngine;

constexpr int64_t kMaxPositions = 64;

// Generates the bytes of `text` one per step, then EOS.
FakeGenerationEngine::NextToken Says(std::string text) {
  return [text](const std::vector<int64_t>&, int64_t step) -> int64_t {
    return step < static_cast<int64_t>(text.size())
               ? static_cast<unsigned char>(text[step])
               : ByteTokenizer::kEos;
  };
}

struct Served {
  std::unique_ptr<GenerationServedModel> model;
  FakeGenerationEngine* engine = nullptr;
};

Served MakeModel(FakeGenerationEngine::NextToken next, bool tokenizer = true,
                 absl::Duration step = absl::Milliseconds(1),
                 std::shared_ptr<const ChatPrompt> chat = nullptr) {
  GenerationModelParts parts;
  parts.config.set_name("gen");
  parts.config.mutable_generation()->set_kv_cache_bytes(1 << 20);
  parts.vocab_size = 258;
  parts.max_positions = kMaxPositions;
  parts.eos_token_ids = {ByteTokenizer::kEos};
  if (tokenizer) parts.tokenizer = std::make_shared<ByteTokenizer>();
  parts.chat = std::move(chat);
  auto engine = std::make_unique<FakeGenerationEngine>(std::move(next), step);
  Served served;
  served.engine = engine.get();
  parts.engine = std::move(engine);
  absl::StatusOr<std::unique_ptr<GenerationServedModel>> model =
      GenerationServedModel::Create(std::move(parts));
  EXPECT_TRUE(model.ok()) << model.status();
  served.model = *std::move(model);
  return served;
}

void AddText(inference::ModelInferRequest& request, const std::string& text) {
  auto* input = request.add_inputs();
  input->set_name("text_input");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(text);
}

void AddIds(inference::ModelInferRequest& request,
            const std::vector<int64_t>& ids) {
  auto* input = request.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT64");
  input->add_shape(static_cast<int64_t>(ids.size()));
  for (int64_t id : ids) input->mutable_contents()->add_int64_contents(id);
}

void SetInt(inference::ModelInferRequest& request, const std::string& name,
            int64_t value) {
  (*request.mutable_parameters())[name].set_int64_param(value);
}

// What one call produced.
struct Outcome {
  absl::Status status;
  std::vector<inference::ModelInferResponse> partials;
  // The model's generated tokens when each partial response came.
  std::vector<uint64_t> tokens_at_partial;
  inference::ModelInferResponse final_response;
};

Outcome Call(ServedModel& model, const inference::ModelInferRequest& request,
             bool stream, std::function<bool()> is_cancelled = nullptr) {
  Outcome outcome;
  absl::Notification done;
  InferenceCall call;
  call.request = &request;
  call.response = &outcome.final_response;
  call.is_cancelled = std::move(is_cancelled);
  if (stream) {
    call.partial_response = [&outcome,
                             &model](inference::ModelInferResponse part) {
      outcome.partials.push_back(std::move(part));
      outcome.tokens_at_partial.push_back(model.statistics().generated_tokens);
    };
  }
  model.Infer(std::move(call), [&](absl::Status status) {
    outcome.status = status;
    done.Notify();
  });
  done.WaitForNotification();
  return outcome;
}

const std::string* RawOutput(const inference::ModelInferResponse& response,
                             const std::string& name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) {
      return &response.raw_output_contents(i);
    }
  }
  return nullptr;
}

std::string TextOf(const inference::ModelInferResponse& response) {
  const std::string* raw = RawOutput(response, "text_output");
  return raw == nullptr ? "<none>" : raw->substr(4);
}

std::vector<int64_t> IdsOf(const inference::ModelInferResponse& response) {
  const std::string* raw = RawOutput(response, "output_ids");
  if (raw == nullptr) return {};
  std::vector<int64_t> ids(raw->size() / 8);
  std::memcpy(ids.data(), raw->data(), raw->size());
  return ids;
}

bool FinalFlag(const inference::ModelInferResponse& response) {
  auto it = response.parameters().find("triton_final_response");
  return it != response.parameters().end() && it->second.bool_param();
}

std::string FinishReason(const inference::ModelInferResponse& response) {
  auto it = response.parameters().find("finish_reason");
  return it == response.parameters().end() ? "" : it->second.string_param();
}

TEST(GenerationServedModelTest, ReportsADecoupledGenerationConfig) {
  Served served = MakeModel(Says("x"));
  const inference::ModelConfig& config = served.model->config();
  EXPECT_TRUE(config.model_transaction_policy().decoupled());
  EXPECT_EQ(config.max_batch_size(), 0);
  EXPECT_EQ(config.generation().default_max_tokens(), 16);
  EXPECT_EQ(config.generation().kv_block_tokens(), 16);
  ASSERT_EQ(config.input_size(), 2);
  EXPECT_EQ(config.input(0).name(), "text_input");
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_STRING);
  EXPECT_EQ(config.input(1).name(), "input_ids");
  // text_output, output_ids, then the log-probability outputs (only
  // produced when a request asks for them).
  ASSERT_EQ(config.output_size(), 7);
  EXPECT_EQ(config.output(1).name(), "output_ids");
  EXPECT_EQ(config.output(2).name(), "output_logprobs");
  EXPECT_EQ(config.output(2).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(config.output(3).name(), "output_top_ids");
  EXPECT_EQ(config.output(3).dims_size(), 2);
  EXPECT_EQ(config.output(6).name(), "output_top_tokens");
  EXPECT_EQ(config.output(6).data_type(), inference::TYPE_STRING);
}

void AddMessages(inference::ModelInferRequest& request,
                 const std::string& json) {
  auto* input = request.add_inputs();
  input->set_name("messages");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(json);
}

TEST(GenerationServedModelTest, MessagesAreRenderedByTheChatTemplate) {
  absl::StatusOr<std::unique_ptr<ChatPrompt>> chat = ChatPrompt::Create(
      "{% for m in messages %}<{{ m['role'] }}:{{ m['content'] }}>"
      "{% endfor %}{% if add_generation_prompt %}A:{% endif %}",
      {});
  ASSERT_TRUE(chat.ok()) << chat.status();
  std::vector<int64_t> prompt_seen;
  Served served = MakeModel(
      [&prompt_seen](const std::vector<int64_t>& prompt, int64_t step) {
        if (step == 0) prompt_seen = prompt;
        return Says("ok")(prompt, step);
      },
      /*tokenizer=*/true, absl::Milliseconds(1), *std::move(chat));
  const auto& inputs = served.model->inputs();
  ASSERT_EQ(inputs.size(), 3);
  EXPECT_EQ(inputs[1].name, "messages");
  inference::ModelInferRequest request;
  AddMessages(request, R"([{"role": "user", "content": "hi"}])");
  Outcome unary = Call(*served.model, request, /*stream=*/false);
  ASSERT_TRUE(unary.status.ok()) << unary.status;
  EXPECT_EQ(TextOf(unary.final_response), "ok");
  // The rendered text's bytes, without the tokenizer's BOS.
  EXPECT_EQ(prompt_seen, ByteIds("<user:hi>A:"));
  EXPECT_EQ(unary.final_response.parameters().at("prompt_tokens").int64_param(),
            11);

  inference::ModelInferRequest bad;
  AddMessages(bad, R"({"role": "user"})");
  Outcome refused = Call(*served.model, bad, /*stream=*/false);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status.message().find("messages"), std::string::npos)
      << refused.status;
}

TEST(GenerationServedModelTest, WithoutAChatTemplateThereIsNoMessagesInput) {
  Served served = MakeModel(Says("ok"));
  for (const TensorSpec& input : served.model->inputs()) {
    EXPECT_NE(input.name, "messages");
  }
  inference::ModelInferRequest request;
  AddMessages(request, R"([{"role": "user", "content": "hi"}])");
  Outcome refused = Call(*served.model, request, /*stream=*/false);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status.message().find("'messages' is not an input"),
            std::string::npos)
      << refused.status;
}

TEST(GenerationServedModelTest, UnaryReturnsTheWholeGeneration) {
  Served served = MakeModel(Says("hello"));
  inference::ModelInferRequest request;
  request.set_model_name("gen");
  AddText(request, "hi");
  const Outcome outcome = Call(*served.model, request, /*stream=*/false);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_EQ(TextOf(outcome.final_response), "hello");
  std::vector<int64_t> expected = ByteIds("hello");
  expected.push_back(ByteTokenizer::kEos);
  EXPECT_EQ(IdsOf(outcome.final_response), expected);
  EXPECT_EQ(FinishReason(outcome.final_response), "stop");
  EXPECT_TRUE(outcome.partials.empty());
  const ServedModelStatistics stats = served.model->statistics();
  EXPECT_EQ(stats.success_count, 1u);
  EXPECT_EQ(stats.fail_count, 0u);
  EXPECT_EQ(stats.generated_tokens, 6u);
  EXPECT_EQ(stats.first_response_ms.count(), 1u);
  EXPECT_EQ(stats.inter_token_seconds.count(), 5u);
}

TEST(GenerationServedModelTest, StreamsOneResponsePerTokenLastOneFinal) {
  Served served = MakeModel(Says("abcdefgh"));
  inference::ModelInferRequest request;
  AddIds(request, {1, 2, 3});
  SetInt(request, "max_tokens", 4);
  const Outcome outcome = Call(*served.model, request, /*stream=*/true);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  ASSERT_EQ(outcome.partials.size(), 3u);
  std::string text;
  for (size_t i = 0; i < outcome.partials.size(); ++i) {
    EXPECT_FALSE(FinalFlag(outcome.partials[i]));
    EXPECT_EQ(IdsOf(outcome.partials[i]),
              std::vector<int64_t>{static_cast<int64_t>('a' + i)});
    text += TextOf(outcome.partials[i]);
  }
  EXPECT_TRUE(FinalFlag(outcome.final_response));
  EXPECT_EQ(IdsOf(outcome.final_response), std::vector<int64_t>{'d'});
  EXPECT_EQ(text + TextOf(outcome.final_response), "abcd");
  // Each token's response went out as soon as it was chosen.
  EXPECT_EQ(outcome.tokens_at_partial, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(FinishReason(outcome.final_response), "length");
  EXPECT_EQ(served.model->statistics().success_count, 1u);
}

TEST(GenerationServedModelTest, EmptyFinalResponseWhenAsked) {
  Served served = MakeModel(Says("ab"));
  inference::ModelInferRequest request;
  AddIds(request, {1});
  (*request.mutable_parameters())["triton_enable_empty_final_response"]
      .set_bool_param(true);
  const Outcome outcome = Call(*served.model, request, /*stream=*/true);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  ASSERT_EQ(outcome.partials.size(), 3u);  // a, b, EOS.
  for (const auto& part : outcome.partials) EXPECT_FALSE(FinalFlag(part));
  EXPECT_TRUE(FinalFlag(outcome.final_response));
  EXPECT_EQ(outcome.final_response.outputs_size(), 0);
  EXPECT_EQ(FinishReason(outcome.final_response), "stop");
}

TEST(GenerationServedModelTest, StopStringAcrossTokensEndsTheSequence) {
  Served served = MakeModel(Says("one END two"));
  inference::ModelInferRequest request;
  AddText(request, "count");
  (*request.mutable_parameters())["stop"].set_string_param("END");
  const Outcome outcome = Call(*served.model, request, /*stream=*/true);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  std::string text;
  for (const auto& part : outcome.partials) text += TextOf(part);
  text += TextOf(outcome.final_response);
  EXPECT_EQ(text, "one ");
  // The sequence ended at the "D": no token after it was generated.
  EXPECT_EQ(outcome.partials.size() + 1, std::string("one END").size());
  EXPECT_EQ(FinishReason(outcome.final_response), "stop");

  const Outcome unary = Call(*served.model, request, /*stream=*/false);
  EXPECT_EQ(TextOf(unary.final_response), "one ");
}

TEST(GenerationServedModelTest, IgnoreEosAndStopTokenIds) {
  Served served = MakeModel(Says(""));  // EOS at once.
  inference::ModelInferRequest request;
  AddIds(request, {5});
  SetInt(request, "max_tokens", 3);
  (*request.mutable_parameters())["ignore_eos"].set_bool_param(true);
  Outcome outcome = Call(*served.model, request, /*stream=*/false);
  ASSERT_TRUE(outcome.status.ok());
  EXPECT_EQ(IdsOf(outcome.final_response).size(), 3u);
  EXPECT_EQ(FinishReason(outcome.final_response), "length");

  Served counting = MakeModel(Says("xyz"));
  inference::ModelInferRequest stop_id;
  AddIds(stop_id, {5});
  (*stop_id.mutable_parameters())["stop_token_ids"].set_string_param("[121]");
  outcome = Call(*counting.model, stop_id, /*stream=*/false);
  ASSERT_TRUE(outcome.status.ok());
  EXPECT_EQ(IdsOf(outcome.final_response), (std::vector<int64_t>{'x', 'y'}));
  EXPECT_EQ(FinishReason(outcome.final_response), "stop");
}

TEST(GenerationServedModelTest, BadRequestsAreInvalidArgumentAndCountOnce) {
  Served served = MakeModel(Says("x"));
  std::vector<std::pair<std::string, inference::ModelInferRequest>> cases;
  inference::ModelInferRequest neither;
  cases.push_back({"neither input", neither});
  inference::ModelInferRequest both;
  AddText(both, "a");
  AddIds(both, {1});
  cases.push_back({"both inputs", both});
  inference::ModelInferRequest zero;
  AddIds(zero, {1});
  SetInt(zero, "max_tokens", 0);
  cases.push_back({"max_tokens 0", zero});
  inference::ModelInferRequest huge = zero;
  SetInt(huge, "max_tokens", int64_t{1} << 40);
  cases.push_back({"max_tokens huge", huge});
  inference::ModelInferRequest beyond = zero;
  SetInt(beyond, "max_tokens", kMaxPositions);  // 1 + 64 > 64 positions.
  cases.push_back({"max_tokens beyond the context", beyond});
  inference::ModelInferRequest wrong_type = zero;
  (*wrong_type.mutable_parameters())["max_tokens"].set_string_param("5");
  cases.push_back({"max_tokens a string", wrong_type});
  inference::ModelInferRequest long_prompt;
  AddIds(long_prompt, std::vector<int64_t>(kMaxPositions, 1));
  cases.push_back({"prompt as long as the context", long_prompt});
  inference::ModelInferRequest long_text;
  AddText(long_text, std::string(kMaxPositions, 'a'));
  cases.push_back({"text longer than the context", long_text});
  inference::ModelInferRequest bad_id;
  AddIds(bad_id, {258});
  cases.push_back({"id outside the vocabulary", bad_id});
  inference::ModelInferRequest bad_stop_id;
  AddIds(bad_stop_id, {1});
  SetInt(bad_stop_id, "stop_token_ids", 999);
  cases.push_back({"stop id outside the vocabulary", bad_stop_id});
  inference::ModelInferRequest bad_utf8;
  AddText(bad_utf8, "\xC3");
  cases.push_back({"text not UTF-8", bad_utf8});
  inference::ModelInferRequest unknown_output;
  AddIds(unknown_output, {1});
  unknown_output.add_outputs()->set_name("logits");
  cases.push_back({"unknown output", unknown_output});
  for (const auto& [what, request] : cases) {
    const Outcome outcome = Call(*served.model, request, /*stream=*/true);
    EXPECT_EQ(outcome.status.code(), absl::StatusCode::kInvalidArgument)
        << what << ": " << outcome.status;
    EXPECT_TRUE(outcome.partials.empty()) << what;
  }
  const ServedModelStatistics stats = served.model->statistics();
  EXPECT_EQ(stats.fail_count, cases.size());
  EXPECT_EQ(stats.success_count, 0u);
  EXPECT_EQ(served.engine->submitted(), 0);
}

TEST(GenerationServedModelTest, WithoutTokenizerIdsOnly) {
  Served served = MakeModel(Says("ab"), /*tokenizer=*/false);
  EXPECT_EQ(served.model->config().input_size(), 1);
  inference::ModelInferRequest text;
  AddText(text, "hi");
  EXPECT_EQ(Call(*served.model, text, false).status.code(),
            absl::StatusCode::kInvalidArgument);
  inference::ModelInferRequest stop;
  AddIds(stop, {1});
  (*stop.mutable_parameters())["stop"].set_string_param("x");
  EXPECT_EQ(Call(*served.model, stop, false).status.code(),
            absl::StatusCode::kInvalidArgument);
  inference::ModelInferRequest ids;
  AddIds(ids, {1});
  const Outcome outcome = Call(*served.model, ids, false);
  ASSERT_TRUE(outcome.status.ok());
  EXPECT_EQ(RawOutput(outcome.final_response, "text_output"), nullptr);
  EXPECT_EQ(IdsOf(outcome.final_response).size(), 3u);
}

TEST(GenerationServedModelTest, CancellingAStreamFreesItsKvBytes) {
  Served served =
      MakeModel(Says(std::string(40, 'z')), true, absl::Milliseconds(5));
  inference::ModelInferRequest request;
  AddIds(request, {1, 2});
  SetInt(request, "max_tokens", 40);
  std::atomic<bool> cancelled{false};
  int64_t kv_while_running = 0;
  Outcome outcome;
  absl::Notification done;
  InferenceCall call;
  call.request = &request;
  call.response = &outcome.final_response;
  call.is_cancelled = [&] { return cancelled.load(); };
  call.partial_response = [&](inference::ModelInferResponse part) {
    outcome.partials.push_back(std::move(part));
    if (outcome.partials.size() == 3) {
      const auto activity = served.model->activity();
      kv_while_running = activity.kv_cache->bytes;
      cancelled = true;
    }
  };
  served.model->Infer(std::move(call), [&](absl::Status status) {
    outcome.status = status;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_GT(kv_while_running, 0);
  const ServedModelActivity after = served.model->activity();
  ASSERT_TRUE(after.kv_cache.has_value());
  EXPECT_EQ(after.kv_cache->bytes, 0);
  EXPECT_GE(after.kv_cache->peak_bytes, kv_while_running);
  EXPECT_LT(outcome.partials.size(), 10u);
  EXPECT_EQ(
      served.model->statistics()
          .requests_by_code[static_cast<int>(absl::StatusCode::kCancelled)],
      1u);
}

TEST(GenerationServedModelTest, TheCoolTierFreesAndStopsReservingTheKvPool) {
  Served served = MakeModel(Says("hi"));
  served.engine->set_pool_capacity_bytes(1 << 20);
  ServedModel& model = *served.model;
  EXPECT_EQ(model.tracked_bytes(), 1 << 20) << "the whole pool is reserved";
  ASSERT_TRUE(model.MoveTo(casting::WeightTier::kWarm).ok());
  EXPECT_EQ(served.engine->releases(), 0) << "warm keeps the pool";
  EXPECT_TRUE(served.engine->keeps_unheld());
  EXPECT_EQ(model.tracked_bytes(), 1 << 20);
  ASSERT_TRUE(model.MoveTo(casting::WeightTier::kCool).ok());
  EXPECT_EQ(served.engine->releases(), 1);
  EXPECT_FALSE(served.engine->keeps_unheld())
      << "the blocks given back later are freed too";
  EXPECT_EQ(model.tracked_bytes(), 0);
  // A cool model still serves.
  inference::ModelInferRequest request;
  AddText(request, "x");
  EXPECT_TRUE(Call(model, request, /*stream=*/false).status.ok());
  ASSERT_TRUE(model.MoveTo(casting::WeightTier::kHot).ok());
  EXPECT_TRUE(served.engine->keeps_unheld());
  EXPECT_EQ(model.tracked_bytes(), 1 << 20) << "reserved again";
}

TEST(GenerationServedModelTest, DestroyingEndsRunningSequencesUnavailable) {
  Served served =
      MakeModel(Says(std::string(60, 'z')), true, absl::Milliseconds(20));
  inference::ModelInferRequest request;
  AddIds(request, {1});
  SetInt(request, "max_tokens", 60);
  absl::Notification first_token;
  absl::Notification done;
  absl::Status status;
  inference::ModelInferResponse response;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  call.partial_response = [&](inference::ModelInferResponse) {
    if (!first_token.HasBeenNotified()) first_token.Notify();
  };
  served.model->Infer(std::move(call), [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  first_token.WaitForNotification();
  served.model.reset();
  ASSERT_TRUE(done.HasBeenNotified());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

TEST(GenerationServedModelTest, ShutdownCancellationEndsSequencesUnavailable) {
  GenerationModelParts parts;
  parts.config.mutable_generation()->set_kv_cache_bytes(1 << 20);
  parts.vocab_size = 258;
  parts.max_positions = kMaxPositions;
  parts.engine = std::make_unique<FakeGenerationEngine>(
      Says(std::string(60, 'z')), absl::Milliseconds(5));
  auto cancellation = std::make_shared<models::Cancellation>();
  parts.cancellation = cancellation;
  std::unique_ptr<GenerationServedModel> model =
      *GenerationServedModel::Create(std::move(parts));
  inference::ModelInferRequest request;
  AddIds(request, {1});
  SetInt(request, "max_tokens", 60);
  std::vector<inference::ModelInferResponse> partials;
  inference::ModelInferResponse response;
  absl::Notification done;
  absl::Status status;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  call.partial_response = [&](inference::ModelInferResponse part) {
    partials.push_back(std::move(part));
    if (partials.size() == 2) cancellation->Cancel("the server is stopping");
  };
  model->Infer(std::move(call), [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "the server is stopping");
  // Later requests are refused at once.
  EXPECT_EQ(Call(*model, request, /*stream=*/true).status.code(),
            absl::StatusCode::kUnavailable);
}

TEST(GenerationServedModelTest, ConfigListingOtherTensorsIsRefused) {
  GenerationModelParts parts;
  parts.config.mutable_generation()->set_kv_cache_bytes(1);
  parts.config.add_input()->set_name("input_ids");  // TYPE_INVALID, no dims.
  parts.vocab_size = 10;
  parts.max_positions = 10;
  parts.engine = std::make_unique<FakeGenerationEngine>(Says(""));
  EXPECT_EQ(GenerationServedModel::Create(std::move(parts)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace castserve
