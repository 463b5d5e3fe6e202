// The wire responses of a generation request (GenerationServedModel's
// outputs, generation_served_model.h): one per token when streaming, the
// final one with finish_reason, and the unary answer.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_RESPONSES_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_RESPONSES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "models/generation/generation.h"
#include "proto/inference.pb.h"
#include "server/servables/generation/generation_sequence.h"

namespace castserve {

// A response of `sequence` carrying `ids` and, when not null, `text` (each
// only if the request wants that output), with triton_final_response false;
// with logprobs asked, the log-probability outputs of the last ids.size()
// entries of sequence.logprobs (the ids' own).
inference::ModelInferResponse TokenResponse(const GenerationSequence& sequence,
                                            absl::Span<const int64_t> ids,
                                            const std::string* text);

// Writes the final response of `sequence`, which `result` ended, into
// sequence.call.response: unary, every id and the whole text; streaming, the
// held response of the last token with the text held back (or one without
// an id), after an empty-final one if asked; triton_final_response true and
// finish_reason ("length" for max_tokens, "stop" otherwise).
// RESOURCE_EXHAUSTED when it is larger than the call's max_response_bytes;
// the text stream's errors.
absl::Status WriteFinalResponse(GenerationSequence& sequence,
                                const models::GenerationResult& result);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_GENERATION_RESPONSES_H_
