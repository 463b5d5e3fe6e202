// Sentence-transformers' Pooling module: token embeddings [batch, seq, dim]
// and the attention mask become one vector per sequence, as the module's
// config (`1_Pooling/config.json`) says. The semantics follow
// sentence-transformers' documented behaviour:
//
//   cls             the embedding of its first token (sentence-transformers
//                   6: the first position whose mask is set)
//   max             the largest value over the sequence's tokens, per column
//   mean            the mean over the sequence's tokens
//   mean_sqrt_len   the sum over its tokens divided by sqrt(token count)
//   weightedmean    the mean weighted by position (1, 2, ... over the padded
//                   sequence)
//   lasttoken       the embedding of its last token (zeros for a sequence
//                   with no token)
//
// "Its tokens" are the positions whose mask is 1; counts are clamped at
// 1e-9 so a sequence without tokens gives zeros instead of NaN. Several
// modes concatenate in sentence-transformers' order: the order listed here
// for the classic switches, the listed order for 6's pooling_mode.
//
// Value types and free functions; thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_SENTENCE_POOLING_H_
#define CASTSERVE_MODELS_ENCODERS_SENTENCE_POOLING_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/loading/hf_config.h"

namespace castserve::models {

enum class PoolingMode {
  kCls,
  kMax,
  kMean,
  kMeanSqrtLen,
  kWeightedMean,
  kLastToken,
};

// "cls", "max", "mean", ... for messages.
absl::string_view PoolingModeName(PoolingMode mode);

struct PoolingConfig {
  // The token embedding width the module expects (the model's hidden size).
  int64_t word_embedding_dimension = 0;
  // The modes switched on, in concatenation order; never empty.
  std::vector<PoolingMode> modes;
  // sentence-transformers masks a prompt's tokens out of the pooling when
  // false; castserve adds no prompt, so either value pools every token.
  bool include_prompt = true;

  // word_embedding_dimension times the number of modes.
  int64_t output_dimension() const {
    return word_embedding_dimension * static_cast<int64_t>(modes.size());
  }

  // Reads a Pooling module's config.json: word_embedding_dimension
  // (required, a size; sentence-transformers 6: embedding_dimension), the
  // boolean pooling_mode_* switches (modes in the order above) or 6's
  // pooling_mode (a name or a list of names: cls, max, mean,
  // mean_sqrt_len_tokens, weightedmean, lasttoken; modes in the listed
  // order; it wins over switches) and include_prompt (optional, false /
  // true when absent). InvalidArgument naming the file and the key for a
  // wrong type, an unknown mode name, an out-of-range dimension or no mode
  // switched on.
  static absl::StatusOr<PoolingConfig> FromHf(const HfConfig& config);
};

// `hidden` [batch, seq, dim] (floating point; dim ==
// config.word_embedding_dimension, asserted) and `mask` [batch, seq] (1 =
// token, 0 = padding; any integer or bool dtype) -> [batch,
// config.output_dimension()] in hidden's dtype and device.
at::Tensor Pool(const PoolingConfig& config, const at::Tensor& hidden,
                const at::Tensor& mask);

// Each row divided by its L2 norm (at least 1e-12): sentence-transformers'
// Normalize module.
at::Tensor L2NormalizeRows(const at::Tensor& rows);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_SENTENCE_POOLING_H_
