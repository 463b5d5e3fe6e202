// Incremental decoding for decoder-only language models: the interface a
// model offers (Model::incremental_decoder) so that generation
// (models/generation/generation.h) runs a prompt once and then one token per
// step over a KV cache, instead of a full forward per token.
#ifndef CASTSERVE_MODELS_GENERATION_INCREMENTAL_DECODER_H_
#define CASTSERVE_MODELS_GENERATION_INCREMENTAL_DECODER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "models/generation/kv_cache.h"
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
  // returns the logits f32 [n, vocab_size] on the model's device: a
  // DecodeBatch of one sequence. Thread-safe for distinct caches.
  at::Tensor DecodeStep(ForwardContext& ctx, const at::Tensor& ids,
                        SequenceKv& cache) const {
    return DecodeBatch(ctx, ids, {{&cache, ids.size(0)}}, /*last_only=*/false);
  }

  // One sequence's share of a batched step: its next `tokens` ids (a
  // prompt, or the one token chosen last) over `cache`.
  struct Segment {
    SequenceKv* cache = nullptr;
    int64_t tokens = 0;
  };
  // One step over several sequences: `ids` (int64 [total] on the model's
  // device) are the segments' new tokens one after the other (total = the
  // sum of their `tokens`, each > 0; each cache distinct, with room, within
  // max_positions(); checked by the caller). Embedding, norms, linears and
  // the MLP run once over all of them (every weight read, decoded and cast
  // once per step); attention runs per sequence over its own cache (as
  // DecodeStep's). Appends every segment's keys and values and returns the
  // logits f32 on the model's device: [total, vocab_size], or with
  // `last_only` each segment's last token's, [segments, vocab_size]. Every
  // module runs under a ModuleCall in `ctx`, so casting hooks, prefetch and
  // cancellation work as in a forward. Throws c10::Error like a forward.
  // Thread-safe for distinct caches.
  virtual at::Tensor DecodeBatch(ForwardContext& ctx, const at::Tensor& ids,
                                 const std::vector<Segment>& segments,
                                 bool last_only) const = 0;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_GENERATION_INCREMENTAL_DECODER_H_
