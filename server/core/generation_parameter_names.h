// The names of the generation parameters proper (generation_parameters.h
// parses them; Triton's keys are not among them), LibTorch-free: REST's
// generate body (rest_generate_codec.h) also takes them at its top level.
#ifndef CASTSERVE_SERVER_CORE_GENERATION_PARAMETER_NAMES_H_
#define CASTSERVE_SERVER_CORE_GENERATION_PARAMETER_NAMES_H_

namespace castserve {

inline constexpr const char* kGenerationParameterNames[] = {
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos"};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_CORE_GENERATION_PARAMETER_NAMES_H_
