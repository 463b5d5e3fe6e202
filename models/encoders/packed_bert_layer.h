// The forward of one BERT encoder layer (EncoderLayer, kBert) on the CPU in
// f32 with fewer, larger operators: the query, key and value projections as
// one product over their concatenated weight, every product over a weight
// packed once into oneDNN's layout (models/kernels/packed_linear.h), the
// activation fused into the intermediate product and the residual added in
// place before each LayerNorm.
//
// Per layer that is 4 products instead of 6 (and no per-call reorder of the
// weights), and 11 LibTorch operators in all. The arithmetic is the unfused
// layer's: the same weights in f32, results equal up to summation order.
//
// EncoderLayer takes this path when the weights' compute copies are plain
// f32 kept for the model's life on the CPU (no layerwise casting, no
// transient copies or prefetch, hence no casting hooks) and no module inside
// the layer has a hook (a profiler's); the layer's own ModuleCall still
// runs. It packs on its first forward; the packed weights are a second copy
// of the layer's products' weights (packed_bytes()).
//
// Immutable after Pack; Forward is thread-safe.
#ifndef CASTSERVE_MODELS_ENCODERS_PACKED_BERT_LAYER_H_
#define CASTSERVE_MODELS_ENCODERS_PACKED_BERT_LAYER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "models/kernels/packed_linear.h"
#include "models/layers/activation.h"

namespace castserve::models {

// Process-wide, default true: whether EncoderLayer may take the packed path
// where its weights allow. Benchmarks and tests switch it off to compare
// with the unfused layers. Thread-safe; read at every layer forward.
void SetPackedEncoderLayers(bool enabled);
bool PackedEncoderLayersEnabled();

class PackedBertLayer {
 public:
  // The layer's plain f32 CPU weights, as the checkpoint names them under
  // "encoder.layer.N.".
  struct Weights {
    at::Tensor query_weight, query_bias;  // attention.self.query
    at::Tensor key_weight, key_bias;      // attention.self.key
    at::Tensor value_weight, value_bias;  // attention.self.value
    at::Tensor attention_output_weight, attention_output_bias;
    at::Tensor attention_norm_weight, attention_norm_bias;  // may lack bias
    at::Tensor intermediate_weight, intermediate_bias;
    at::Tensor output_weight, output_bias;
    at::Tensor output_norm_weight, output_norm_bias;  // may lack bias
  };
  struct Options {
    int64_t heads = 0;
    double layer_norm_eps = 1e-12;
    Activation activation = Activation::kGelu;
  };

  // Packs `weights` (copies them; keeps no reference to the tensors given).
  // Requires PackedLinear::Available().
  PackedBertLayer(const Weights& weights, const Options& options);

  // x f32 [batch, seq, hidden] and the additive attention bias
  // (broadcastable to [batch, heads, seq, seq], or undefined) -> the layer's
  // output, the shape of x.
  at::Tensor Forward(const at::Tensor& x,
                     const at::Tensor& attention_bias) const;

  // Bytes the layer holds beyond the weights' compute copies: the packed
  // weights, the query/key/value biases concatenated, and its copies of the
  // LayerNorm parameters.
  int64_t packed_bytes() const;

 private:
  const Options options_;
  PackedLinear qkv_;
  PackedLinear attention_output_;
  PackedLinear intermediate_;
  PackedLinear output_;
  at::Tensor attention_norm_weight_, attention_norm_bias_;
  at::Tensor output_norm_weight_, output_norm_bias_;
  int64_t copied_bytes_ = 0;  // The concatenated bias and the norm copies.
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_ENCODERS_PACKED_BERT_LAYER_H_
