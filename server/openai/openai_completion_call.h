// OpenAiCompletionCall: one POST /v1/completions or /v1/chat/completions
// through the InferenceCore. The model's config first (a generation model;
// for chat, one whose signature lists `messages`: a folder with a chat
// template), then one ModelInfer per choice (prompts x n), each its own
// sequence with its own seed (seed + choice index when the request gives
// one), all at once.
//
// Unary: one JSON answer once every choice ended, or the first failure.
// stream: 200 text/event-stream once the first token is in, one OpenAI
// chunk per token and choice (the core's partial responses), a last chunk
// per choice with its finish_reason, a usage chunk (choices []) when
// stream_options.include_usage, and "data: [DONE]". A failure before the
// first chunk is an HTTP error; after it, one event {"error": {...}} and
// the end (no [DONE]). A client that closes its connection cancels every
// sequence (the HttpServer's client_gone is each call's is_cancelled), which
// frees their KV blocks.
//
// logprobs: each choice's (and each chunk's) tokens with their
// log-probabilities (openai_logprobs.h), completions' or chat's shape.
//
// usage: prompt_tokens counts each prompt once (the model's prompt_tokens
// parameter), completion_tokens every choice's new ids (an EOS included).
//
// Thread-safe: choices' events come from the model's thread, serialised by
// the call's mutex.
#ifndef CASTSERVE_SERVER_OPENAI_OPENAI_COMPLETION_CALL_H_
#define CASTSERVE_SERVER_OPENAI_OPENAI_COMPLETION_CALL_H_

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/model_config.pb.h"
#include "server/core/inference_core.h"
#include "server/http/http_body_stream.h"
#include "server/http/http_server.h"
#include "server/openai/openai_requests.h"

namespace castserve::openai {

class OpenAiCompletionCall
    : public std::enable_shared_from_this<OpenAiCompletionCall> {
 public:
  // Events written and not yet sent, at most.
  static constexpr size_t kMaxPendingStreamBytes = 1 << 20;

  // Starts the call; `reply` gets its answer. `core` must outlive it.
  static void Start(InferenceCore* core, CompletionRequest request,
                    CallContext call, HttpReply reply);

 private:
  struct Choice {
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
    std::string text;  // Unary: the whole text; stream: unused.
    // Unary with logprobs asked: the choice's `logprobs`; else null.
    nlohmann::json logprobs;
    // Completions' text_offset of the next token.
    int64_t text_offset = 0;
    int64_t completion_tokens = 0;
    int64_t prompt_tokens = 0;
    bool role_sent = false;
  };

  OpenAiCompletionCall(InferenceCore* core, CompletionRequest request,
                       CallContext call, HttpReply reply);

  void Run(const inference::ModelConfig& config);
  void Token(size_t index, const inference::ModelInferResponse& response);
  void Ended(size_t index, absl::Status status);
  // Once every choice ended.
  void Finish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // `logprobs`: the chunk's tokens' (null when not asked).
  nlohmann::json Chunk(size_t index, const std::string& text,
                       nlohmann::json logprobs,
                       const std::string* finish_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The `logprobs` of `response`'s tokens for choice `index` (null when not
  // asked); advances its text_offset.
  absl::StatusOr<nlohmann::json> LogprobsOf(
      size_t index, const inference::ModelInferResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  nlohmann::json Usage() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  nlohmann::json UnaryAnswer() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Send(const nlohmann::json& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  InferenceCore* const core_;
  const CompletionRequest request_;
  const std::string id_;
  const int64_t created_;
  CallContext call_;
  const std::shared_ptr<HttpBodyStream> stream_;

  // Set with failed_; read by the sequences' cancellation polls.
  std::atomic<bool> abandoned_{false};
  absl::Mutex mutex_;
  // Sized once in Run, before any sequence starts.
  std::vector<Choice> choices_;
  HttpReply reply_ ABSL_GUARDED_BY(mutex_);
  size_t running_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mutex_);
  // Set once the answer (or the stream's head) was given.
  bool answered_ ABSL_GUARDED_BY(mutex_) = false;
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace castserve::openai

#endif  // CASTSERVE_SERVER_OPENAI_OPENAI_COMPLETION_CALL_H_
