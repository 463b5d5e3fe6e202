#include "models/generation/generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "c10/core/InferenceMode.h"
#include "casting/device/device_codec.h"
#include "models/generation/incremental_decoder.h"
#include "models/loading/hf_config.h"

namespace castserve::models {
namespace {

// `key` of `config` as a list of ids: an integer, a list of them, or absent
// (empty).
absl::StatusOr<std::vector<int64_t>> EosIds(const HfConfig& config) {
  if (!config.Has("eos_token_id")) return std::vector<int64_t>{};
  absl::StatusOr<int64_t> one = config.GetInt("eos_token_id");
  if (one.ok()) return std::vector<int64_t>{*one};
  return config.GetIntList("eos_token_id");
}

absl::Status CheckIds(const std::vector<int64_t>& ids, int64_t vocab_size) {
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

bool Contains(const std::vector<int64_t>& ids, int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

absl::StatusOr<const IncrementalDecoder*> DecoderOf(const Model& model) {
  const IncrementalDecoder* decoder = model.incremental_decoder();
  if (decoder == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "architecture ", model.architecture(), " cannot generate"));
  }
  return decoder;
}

std::optional<GenerationResult::Stop> StopByIdOf(
    const GenerationOptions& options, int64_t token) {
  if (Contains(options.eos_token_ids, token)) {
    return GenerationResult::Stop::kEos;
  }
  if (Contains(options.stop_token_ids, token)) {
    return GenerationResult::Stop::kStopToken;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<int64_t>> ReadEosTokenIds(
    const std::string& folder) {
  for (const char* file : {"generation_config.json", "config.json"}) {
    absl::StatusOr<HfConfig> config =
        HfConfig::Load(absl::StrCat(folder, "/", file));
    if (absl::IsNotFound(config.status())) continue;
    if (!config.ok()) return config.status();
    if (!config->Has("eos_token_id")) continue;
    return EosIds(*config);
  }
  return std::vector<int64_t>{};
}

absl::StatusOr<std::unique_ptr<DecodeSession>> DecodeSession::Create(
    const Model& model, int64_t capacity) {
  absl::StatusOr<const IncrementalDecoder*> decoder_or = DecoderOf(model);
  if (!decoder_or.ok()) return decoder_or.status();
  const IncrementalDecoder* decoder = *decoder_or;
  if (capacity <= 0 || capacity > decoder->max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sequence of ", capacity, " tokens does not fit the model's ",
        decoder->max_positions(), " positions"));
  }
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      KvCache::Create(decoder->kv_cache_shape(), capacity);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<DecodeSession>(
      new DecodeSession(model, *decoder, *std::move(cache)));
}

absl::StatusOr<at::Tensor> DecodeSession::Feed(
    const std::vector<int64_t>& tokens, const Cancellation* cancellation) {
  return Run(tokens, cancellation, /*last_only=*/false);
}

absl::StatusOr<at::Tensor> DecodeSession::FeedLast(
    const std::vector<int64_t>& tokens, const Cancellation* cancellation) {
  return Run(tokens, cancellation, /*last_only=*/true);
}

absl::StatusOr<at::Tensor> DecodeSession::Run(
    const std::vector<int64_t>& tokens, const Cancellation* cancellation,
    bool last_only) {
  if (tokens.empty()) {
    return absl::InvalidArgumentError("no tokens to decode");
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > capacity() - length()) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " tokens do not fit after ", length(),
                     " in a sequence of at most ", capacity()));
  }
  absl::Status ids_ok = CheckIds(tokens, decoder_.vocab_size());
  if (!ids_ok.ok()) return ids_ok;
  return CatchExceptions([&]() -> absl::StatusOr<at::Tensor> {
    c10::InferenceMode inference_mode;
    // One context per step: its compute copies go when the step ends.
    ForwardContext context(cancellation);
    at::Tensor ids = casting::ToDevice(
        at::tensor(tokens, at::TensorOptions().dtype(at::kLong)),
        model_.device());
    at::Tensor logits =
        decoder_.DecodeBatch(context, ids, {{cache_.get(), n}}, last_only);
    if (last_only) logits = logits[0];
    return logits.is_cpu() ? logits : logits.cpu();
  });
}

absl::StatusOr<CheckedGeneration> CheckGenerationRequest(
    int64_t vocab_size, int64_t max_positions, std::vector<int64_t> prompt,
    GenerationOptions options) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (options.max_new_tokens <= 0 || options.max_new_tokens > kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens is ", options.max_new_tokens,
        " (a request's max_tokens); it must be in [1, ", kMaxNewTokens, "]"));
  }
  absl::Status sampling = ValidateSamplingParams(options.sampling);
  if (!sampling.ok()) return sampling;
  const int64_t length = static_cast<int64_t>(prompt.size());
  if (length > max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", length, " tokens, more than the model's ",
        max_positions, " positions (its context)"));
  }
  if (options.max_new_tokens > max_positions - length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens ", options.max_new_tokens, " after a prompt of ",
        length, " tokens exceeds the model's ", max_positions,
        " positions (its context)"));
  }
  if (absl::Status ids = CheckIds(prompt, vocab_size); !ids.ok()) return ids;
  absl::Status stop_ids = CheckIds(options.stop_token_ids, vocab_size);
  if (!stop_ids.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop_token_ids: ", stop_ids.message()));
  }
  return CheckedGeneration(vocab_size, max_positions, std::move(prompt),
                           std::move(options));
}

absl::StatusOr<CheckedGeneration> CheckGenerationRequest(
    const Model& model, std::vector<int64_t> prompt,
    GenerationOptions options) {
  absl::StatusOr<const IncrementalDecoder*> decoder = DecoderOf(model);
  if (!decoder.ok()) return decoder.status();
  return CheckGenerationRequest((*decoder)->vocab_size(),
                                (*decoder)->max_positions(), std::move(prompt),
                                std::move(options));
}

bool CheckedFor(const CheckedGeneration& request,
                const IncrementalDecoder& decoder) {
  return request.vocab_size() == decoder.vocab_size() &&
         request.max_positions() <= decoder.max_positions();
}

absl::StatusOr<GenerationResult> Generate(const Model& model,
                                          const CheckedGeneration& request,
                                          const Cancellation* cancellation) {
  absl::StatusOr<const IncrementalDecoder*> decoder = DecoderOf(model);
  if (!decoder.ok() || !CheckedFor(request, **decoder)) {
    return absl::InternalError(
        "Generate was given a request checked against another model");
  }
  const std::vector<int64_t>& prompt = request.prompt();
  const GenerationOptions& options = request.options();
  Sampler sampler = Sampler::ForChecked(options.sampling);
  absl::StatusOr<std::unique_ptr<DecodeSession>> session =
      DecodeSession::Create(
          model, static_cast<int64_t>(prompt.size()) + options.max_new_tokens);
  if (!session.ok()) return session.status();
  GenerationResult result;
  result.kv_cache_bytes = (*session)->kv_cache_bytes();
  std::vector<int64_t> next = prompt;
  std::vector<int64_t> history = prompt;  // For the repetition penalty.
  while (static_cast<int64_t>(result.tokens.size()) < options.max_new_tokens) {
    if (cancellation != nullptr && cancellation->cancelled()) {
      return absl::CancelledError(
          absl::StrCat("generation cancelled: ", cancellation->reason()));
    }
    absl::StatusOr<at::Tensor> logits =
        (*session)->FeedLast(next, cancellation);
    if (!logits.ok()) return logits.status();
    SampledToken sampled = sampler.Next(*logits, history);
    const int64_t token = sampled.id;
    result.tokens.push_back(token);
    if (sampled.logprobs) {
      result.logprobs.push_back(*std::move(sampled.logprobs));
    }
    history.push_back(token);
    if (std::optional<GenerationResult::Stop> stop =
            StopByIdOf(options, token)) {
      result.stop = *stop;
      return result;
    }
    next = {token};
  }
  return result;
}

}  // namespace castserve::models
