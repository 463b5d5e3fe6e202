// Incremental decoding for decoder-only language models: the interface a
// model offers (Model::incremental_decoder) so that generation
// (models/generation.h) runs a prompt once and then one token per step over
// a KV cache, instead of a full forward per token.
#ifndef CASTSERVE_MODELS_INCREMENTAL_DECODER_H_
#define CASTSERVE_MODELS_INCREMENTAL_DECODER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "models/kv_cache.h"
#include "models/module.h"

namespace castserve::models {

class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;

  // The cache one sequence needs (layers, heads, compute dtype, device).
  virtual KvCacheShape kv_cache_shape() const = 0;
  // Positions in the table: a sequence never grows beyond it.
  virtual int64_t max_positions() const = 0;
  virtual int64_t vocab_size() const = 0;

  // Runs `ids` (int64 [n] on the model's device, ids within the vocabulary,
  // cache.length() + n <= max_positions(), checked by the caller) at
  // positions cache.length()..cache.length()+n-1 through every layer,
  // attending over the cached tokens and each other (causal, with the
  // model's sliding window), appends their keys and values to `cache` and
  // returns the logits f32 [n, vocab_size] on the model's device. Every
  // module runs under a ModuleCall in `ctx`, so casting hooks and
  // cancellation work as in a forward. Throws c10::Error like a forward.
  // Thread-safe for distinct caches.
  virtual at::Tensor DecodeStep(ForwardContext& ctx, const at::Tensor& ids,
                                KvCache& cache) const = 0;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_INCREMENTAL_DECODER_H_
