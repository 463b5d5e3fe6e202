#include "server/test_util/fake_generation_model.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "casting/executor.h"

namespace castserve::testing {
namespace {

std::string BytesElement(absl::string_view text) {
  const uint32_t length = text.size();
  std::string raw(reinterpret_cast<const char*>(&length), 4);
  raw.append(text.data(), text.size());
  return raw;
}

// The response of tokens [first, end).
void FillTokens(const inference::ModelInferRequest& request, int64_t first,
                int64_t end, inference::ModelInferResponse* response) {
  response->set_model_name(request.model_name());
  response->set_model_version("1");
  response->set_id(request.id());
  std::string text;
  std::string ids;
  for (int64_t i = first; i < end; ++i) {
    absl::StrAppend(&text, "t", i, " ");
    const int64_t id = 100 + i;
    ids.append(reinterpret_cast<const char*>(&id), sizeof id);
  }
  auto* text_output = response->add_outputs();
  text_output->set_name("text_output");
  text_output->set_datatype("BYTES");
  text_output->add_shape(1);
  response->add_raw_output_contents(BytesElement(text));
  auto* id_output = response->add_outputs();
  id_output->set_name("output_ids");
  id_output->set_datatype("INT64");
  id_output->add_shape(end - first);
  response->add_raw_output_contents(ids);
}

// An int parameter of the request, or `fallback` when it has none.
absl::StatusOr<int64_t> IntParameter(
    const inference::ModelInferRequest& request, const std::string& name,
    int64_t fallback) {
  auto it = request.parameters().find(name);
  if (it == request.parameters().end()) return fallback;
  if (it->second.parameter_choice_case() !=
      inference::InferParameter::kInt64Param) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", name, "' must be an integer, got ",
        it->second.has_string_param() ? "a string" : "another type"));
  }
  return it->second.int64_param();
}

}  // namespace

FakeGenerationModel::FakeGenerationModel(const std::string& name,
                                         absl::Duration token_interval)
    : token_interval_(token_interval) {
  config_.set_name(name);
  config_.set_max_batch_size(0);
  config_.mutable_model_transaction_policy()->set_decoupled(true);
  inputs_ = {{"text_input", "BYTES", {1}, /*optional=*/true},
             {"input_ids", "INT64", {-1}, /*optional=*/true}};
  outputs_ = {{"text_output", "BYTES", {1}}, {"output_ids", "INT64", {-1}}};
}

void FakeGenerationModel::Infer(InferenceCall call,
                                std::function<void(absl::Status)> done) {
  const inference::ModelInferRequest& request = *call.request;
  if (request.inputs_size() != 1 || request.raw_input_contents_size() != 1) {
    return done(absl::InvalidArgumentError(
        "give exactly one of 'text_input' and 'input_ids'"));
  }
  absl::StatusOr<int64_t> max_tokens = IntParameter(request, "max_tokens", 3);
  if (!max_tokens.ok()) return done(max_tokens.status());
  absl::StatusOr<int64_t> fail_after =
      IntParameter(request, "fake_fail_after", -1);
  if (!fail_after.ok()) return done(fail_after.status());
  {
    absl::MutexLock lock(&mutex_);
    last_prompt_ = request.raw_input_contents(0);
    ++running_;
  }
  casting::Executor::Default().Schedule([self = shared_from_this(),
                                         call = std::move(call),
                                         max_tokens = *max_tokens,
                                         fail_after = *fail_after,
                                         done = std::move(done)]() mutable {
    self->Generate(std::move(call), max_tokens, fail_after, std::move(done));
  });
}

void FakeGenerationModel::Generate(InferenceCall call, int64_t max_tokens,
                                   int64_t fail_after,
                                   std::function<void(absl::Status)> done) {
  absl::Status status;
  const bool streaming = call.partial_response != nullptr;
  for (int64_t i = 0; i < max_tokens && status.ok(); ++i) {
    absl::SleepFor(token_interval_);
    if (call.is_cancelled && call.is_cancelled()) {
      status = absl::CancelledError("the client went away");
      absl::MutexLock lock(&mutex_);
      ++cancelled_;
    } else if (i == fail_after) {
      status = absl::InternalError("fake failure");
    } else if (streaming && i + 1 < max_tokens) {
      inference::ModelInferResponse partial;
      FillTokens(*call.request, i, i + 1, &partial);
      (*partial.mutable_parameters())["triton_final_response"].set_bool_param(
          false);
      call.partial_response(std::move(partial));
    }
  }
  if (status.ok()) {
    FillTokens(*call.request, streaming ? max_tokens - 1 : 0, max_tokens,
               call.response);
    auto& parameters = *call.response->mutable_parameters();
    parameters["triton_final_response"].set_bool_param(true);
    parameters["finish_reason"].set_string_param("length");
  }
  {
    absl::MutexLock lock(&mutex_);
    --running_;
  }
  done(status);
}

int64_t FakeGenerationModel::pending_requests() const {
  absl::MutexLock lock(&mutex_);
  return running_;
}

bool FakeGenerationModel::AwaitCancelled(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  auto enough = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mutex_) {
    return cancelled_ >= count;
  };
  return mutex_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

std::string FakeGenerationModel::last_prompt() const {
  absl::MutexLock lock(&mutex_);
  return last_prompt_;
}

}  // namespace castserve::testing
