#include "server/openai/openai_completion_call.h"

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/openai/openai_calls.h"
#include "server/openai/openai_errors.h"
#include "server/openai/openai_logprobs.h"
#include "server/openai/openai_tensors.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

constexpr char kEventStream[] = "text/event-stream";
constexpr char kTextOutput[] = "text_output";
constexpr char kOutputIds[] = "output_ids";

std::string Event(const json& body) {
  return absl::StrCat(
      "data: ", body.dump(-1, ' ', false, json::error_handler_t::replace),
      "\n\n");
}

void SetInt(inference::ModelInferRequest& request, const std::string& key,
            int64_t value) {
  (*request.mutable_parameters())[key].set_int64_param(value);
}

void SetDouble(inference::ModelInferRequest& request, const std::string& key,
               double value) {
  (*request.mutable_parameters())[key].set_double_param(value);
}

// The generation parameters every choice shares, and its own seed.
void SetParameters(const CompletionRequest& request, uint64_t seed,
                   inference::ModelInferRequest& infer) {
  if (request.max_tokens.has_value()) {
    SetInt(infer, "max_tokens", *request.max_tokens);
  }
  SetDouble(infer, "temperature", request.temperature);
  SetDouble(infer, "top_p", request.top_p);
  SetInt(infer, "seed", static_cast<int64_t>(seed));
  if (request.presence_penalty != 0) {
    SetDouble(infer, "presence_penalty", request.presence_penalty);
  }
  if (request.frequency_penalty != 0) {
    SetDouble(infer, "frequency_penalty", request.frequency_penalty);
  }
  if (request.logprobs) {
    (*infer.mutable_parameters())["logprobs"].set_bool_param(true);
    SetInt(infer, "top_logprobs", request.top_logprobs);
  }
  if (!request.stop.empty()) {
    (*infer.mutable_parameters())["stop"].set_string_param(
        json(request.stop).dump());
  }
}

// Seeds castserve draws when the request names none: within int64.
uint64_t RandomSeed() { return RandomUint64() >> 2; }

}  // namespace

void OpenAiCompletionCall::Start(InferenceCore* core, CompletionRequest request,
                                 CallContext call, HttpReply reply) {
  std::shared_ptr<OpenAiCompletionCall> self(new OpenAiCompletionCall(
      core, std::move(request), std::move(call), std::move(reply)));
  WithModelConfig(core, self->call_, self->request_.model,
                  [self](absl::StatusOr<inference::ModelConfig> config) {
                    if (config.ok()) return self->Run(*config);
                    absl::MutexLock lock(&self->mutex_);
                    self->Fail(config.status());
                    if (self->stream_) self->stream_->Close();
                  });
}

OpenAiCompletionCall::OpenAiCompletionCall(InferenceCore* core,
                                           CompletionRequest request,
                                           CallContext call, HttpReply reply)
    : core_(core),
      request_(std::move(request)),
      id_(RandomId(request_.chat ? "chatcmpl" : "cmpl")),
      created_(absl::ToUnixSeconds(absl::Now())),
      call_(std::move(call)),
      stream_(request_.stream
                  ? std::make_shared<HttpBodyStream>(kMaxPendingStreamBytes)
                  : nullptr),
      reply_(std::move(reply)) {}

void OpenAiCompletionCall::Run(const inference::ModelConfig& config) {
  absl::Status refused;
  const char* endpoint =
      request_.chat ? "/v1/chat/completions" : "/v1/completions";
  if (KindOf(config) != ModelKind::kGeneration) {
    refused = WrongKind(config, endpoint);
  } else if (request_.chat && !HasInput(config, "messages")) {
    refused = InvalidField(
        "messages",
        absl::StrCat("model '", config.name(),
                     "' has no chat template (chat_template.jinja or "
                     "tokenizer_config.json's chat_template in its folder, "
                     "and a tokenizer): use /v1/completions"));
  } else if (request_.logprobs && !HasInput(config, "text_input")) {
    refused = InvalidField(
        "logprobs", absl::StrCat("model '", config.name(),
                                 "' has no tokenizer: its tokens have no text "
                                 "for logprobs"));
  } else if (!request_.chat && !HasInput(config, "text_input") &&
             std::any_of(request_.prompts.begin(), request_.prompts.end(),
                         [](const TextOrTokens& p) { return !p.is_tokens; })) {
    refused = InvalidField("prompt",
                           absl::StrCat("model '", config.name(),
                                        "' has no tokenizer: send token ids"));
  }
  if (!refused.ok()) {
    absl::MutexLock lock(&mutex_);
    Fail(core_->RefuseInference(refused));
    if (stream_) stream_->Close();
    return;
  }
  const size_t prompts = request_.chat ? 1 : request_.prompts.size();
  choices_.resize(prompts * request_.n);
  for (size_t p = 0; p < prompts; ++p) {
    for (int j = 0; j < request_.n; ++j) {
      inference::ModelInferRequest& infer =
          choices_[p * request_.n + j].request;
      infer.set_model_name(request_.model);
      if (request_.chat) {
        AddBytesInput(config, "messages", request_.messages_json, &infer);
      } else if (request_.prompts[p].is_tokens) {
        AddTokenInputs(config, request_.prompts[p].tokens, &infer);
      } else {
        AddBytesInput(config, "text_input", request_.prompts[p].text, &infer);
      }
      SetParameters(request_,
                    request_.seed.has_value()
                        ? static_cast<uint64_t>(*request_.seed) + j
                        : RandomSeed(),
                    infer);
    }
  }
  {
    absl::MutexLock lock(&mutex_);
    running_ = choices_.size();
  }
  std::shared_ptr<OpenAiCompletionCall> self = shared_from_this();
  for (size_t i = 0; i < choices_.size(); ++i) {
    CallContext call;
    call.authorization = call_.authorization;
    call.deadline = call_.deadline;
    // A failed sibling ends the others: the answer is an error already.
    call.is_cancelled = [self, client_gone = call_.is_cancelled] {
      return self->abandoned_.load() || (client_gone && client_gone());
    };
    if (request_.stream) {
      call.partial_response = [self, i](inference::ModelInferResponse r) {
        self->Token(i, r);
      };
    }
    core_->ModelInfer(
        std::move(call), choices_[i].request, &choices_[i].response,
        [self, i](absl::Status status) { self->Ended(i, status); });
  }
}

absl::StatusOr<json> OpenAiCompletionCall::LogprobsOf(
    size_t index, const inference::ModelInferResponse& response) {
  if (!request_.logprobs) return json(nullptr);
  absl::StatusOr<AnswerLogprobs> logprobs =
      ReadLogprobs(response, request_.top_logprobs);
  if (!logprobs.ok()) return logprobs.status();
  if (request_.chat) return ChatLogprobsJson(*logprobs);
  return CompletionLogprobsJson(*logprobs, &choices_[index].text_offset);
}

json OpenAiCompletionCall::Chunk(size_t index, const std::string& text,
                                 json logprobs,
                                 const std::string* finish_reason) {
  json choice = {{"index", index},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", nullptr}};
  if (finish_reason != nullptr) choice["finish_reason"] = *finish_reason;
  if (request_.chat) {
    json delta = json::object();
    Choice& state = choices_[index];
    if (!state.role_sent) {
      delta["role"] = "assistant";
      state.role_sent = true;
    }
    if (!text.empty() || finish_reason == nullptr) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  json chunk = {
      {"id", id_},
      {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},
      {"model", request_.model},
      {"choices", json::array({std::move(choice)})}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

void OpenAiCompletionCall::Token(
    size_t index, const inference::ModelInferResponse& response) {
  absl::StatusOr<std::string> text = BytesOutput(response, kTextOutput);
  absl::MutexLock lock(&mutex_);
  if (failed_) return;
  if (!text.ok()) return Fail(text.status());
  absl::StatusOr<json> logprobs = LogprobsOf(index, response);
  if (!logprobs.ok()) return Fail(logprobs.status());
  choices_[index].completion_tokens += ElementCount(response, kOutputIds);
  Send(Chunk(index, *text, *std::move(logprobs), nullptr));
}

void OpenAiCompletionCall::Ended(size_t index, absl::Status status) {
  Choice& choice = choices_[index];
  absl::StatusOr<std::string> text =
      status.ok() ? BytesOutput(choice.response, kTextOutput)
                  : absl::StatusOr<std::string>(std::string());
  absl::MutexLock lock(&mutex_);
  if (status.ok() && !text.ok()) status = text.status();
  absl::StatusOr<json> logprobs = json(nullptr);
  if (status.ok()) logprobs = LogprobsOf(index, choice.response);
  if (status.ok() && !logprobs.ok()) status = logprobs.status();
  if (status.ok()) {
    const int64_t tokens = ElementCount(choice.response, kOutputIds);
    choice.completion_tokens += tokens;
    choice.prompt_tokens =
        IntParameter(choice.response, "prompt_tokens").value_or(0);
    const std::string finish_reason =
        StringParameter(choice.response, "finish_reason").value_or("stop");
    if (request_.stream && !failed_) {
      if (!text->empty() || (request_.logprobs && tokens > 0)) {
        Send(Chunk(index, *text, *std::move(logprobs), nullptr));
      }
      Send(Chunk(index, "", nullptr, &finish_reason));
    } else {
      choice.text = *std::move(text);
      choice.logprobs = *std::move(logprobs);
    }
  } else if (!failed_) {
    status_ = status;
    Fail(status);
  }
  if (--running_ == 0) Finish();
}

json OpenAiCompletionCall::Usage() const {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < choices_.size(); ++i) {
    // Each prompt once, whatever n.
    if (i % request_.n == 0) prompt_tokens += choices_[i].prompt_tokens;
    completion_tokens += choices_[i].completion_tokens;
  }
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json OpenAiCompletionCall::UnaryAnswer() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& choice = choices_[i];
    json entry = {
        {"index", i},
        {"logprobs", choice.logprobs},
        {"finish_reason",
         StringParameter(choice.response, "finish_reason").value_or("stop")}};
    if (request_.chat) {
      entry["message"] = {{"role", "assistant"}, {"content", choice.text}};
    } else {
      entry["text"] = choice.text;
    }
    choices.push_back(std::move(entry));
  }
  return {{"id", id_},
          {"object", request_.chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", request_.model},
          {"choices", std::move(choices)},
          {"usage", Usage()}};
}

void OpenAiCompletionCall::Finish() {
  if (request_.stream) {
    if (!failed_) {
      if (request_.include_usage) {
        json usage = {{"id", id_},
                      {"object", request_.chat ? "chat.completion.chunk"
                                               : "text_completion"},
                      {"created", created_},
                      {"model", request_.model},
                      {"choices", json::array()},
                      {"usage", Usage()}};
        Send(usage);
      }
      stream_->Write("data: [DONE]\n\n");
    }
    stream_->Close();
    return;
  }
  if (failed_ || answered_) return;
  answered_ = true;
  reply_(JsonAnswer(UnaryAnswer()));
}

void OpenAiCompletionCall::Send(const json& chunk) {
  std::string event = Event(chunk);
  if (answered_) {
    stream_->Write(event);
    return;
  }
  answered_ = true;
  reply_({200,
          kEventStream,
          std::move(event),
          {{"Cache-Control", "no-cache"}},
          stream_});
}

void OpenAiCompletionCall::Fail(const absl::Status& status) {
  failed_ = true;
  abandoned_ = true;
  if (!answered_) {
    answered_ = true;
    return reply_(ErrorResponse(status));
  }
  // Mid-stream: the status line went out long ago.
  stream_->Write(absl::StrCat("data: ", ErrorJson(status), "\n\n"));
}

}  // namespace castserve::openai
