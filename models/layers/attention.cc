#include "models/layers/attention.h"

#include <ATen/ATen.h>

#include <limits>
#include <optional>

#include "c10/util/Exception.h"

namespace castserve::models {
namespace {

double LowestFinite(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return std::numeric_limits<float>::lowest();
    case at::kDouble:
      return std::numeric_limits<double>::lowest();
    case at::kHalf:
      return -65504.0;
    case at::kBFloat16:
      return std::numeric_limits<c10::BFloat16>::lowest();
    default:
      TORCH_CHECK(false, "attention bias dtype must be floating, got ", dtype);
  }
}

}  // namespace

at::Tensor MakeAttentionBias(const at::Tensor& key_mask, int64_t batch,
                             int64_t query_len, int64_t key_len, bool causal,
                             const at::TensorOptions& options,
                             int64_t sliding_window) {
  const at::ScalarType dtype = options.dtype().toScalarType();
  const c10::Device device = options.device();
  at::TensorOptions bool_options =
      at::TensorOptions().dtype(at::kBool).device(device);
  at::Tensor allowed = at::ones({batch, 1, query_len, key_len}, bool_options);
  if (key_mask.defined()) {
    TORCH_CHECK(key_mask.dim() == 2 && key_mask.size(0) == batch &&
                    key_mask.size(1) == key_len,
                "attention mask must be [", batch, ", ", key_len, "], got ",
                key_mask.sizes());
    allowed = allowed & key_mask.ne(0).view({batch, 1, 1, key_len});
  }
  if (causal) {
    // Query i sits at key position i + (key_len - query_len).
    at::Tensor causal_allowed =
        at::ones({query_len, key_len}, bool_options).tril(key_len - query_len);
    if (sliding_window > 0) {
      causal_allowed =
          causal_allowed.triu(key_len - query_len - sliding_window + 1);
    }
    allowed = allowed & causal_allowed.view({1, 1, query_len, key_len});
  }
  at::Tensor bias =
      at::zeros(allowed.sizes(), at::TensorOptions(dtype).device(device));
  return bias.masked_fill(allowed.logical_not(), LowestFinite(dtype));
}

at::Tensor MakeBandAttentionBias(const at::Tensor& key_mask, int64_t window,
                                 const at::TensorOptions& options) {
  TORCH_CHECK(key_mask.dim() == 2, "attention mask must be [batch, seq], got ",
              key_mask.sizes());
  TORCH_CHECK(window > 0, "a band attention window must be positive");
  const int64_t batch = key_mask.size(0), seq = key_mask.size(1);
  const c10::Device device = options.device();
  const at::Tensor band =
      at::ones({seq, seq}, at::TensorOptions().dtype(at::kBool).device(device))
          .triu(-window)
          .tril(window);
  const at::Tensor allowed = band.view({1, 1, seq, seq}) &
                             key_mask.to(device).ne(0).view({batch, 1, 1, seq});
  const at::ScalarType dtype = options.dtype().toScalarType();
  return at::zeros(allowed.sizes(), at::TensorOptions(dtype).device(device))
      .masked_fill(allowed.logical_not(), LowestFinite(dtype));
}

at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v,
                                     const at::Tensor& bias, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "attention inputs must be [batch, heads, seq, dim]");
  TORCH_CHECK(k.sizes() == v.sizes(), "keys ", k.sizes(), " and values ",
              v.sizes(), " differ in shape");
  const int64_t q_heads = q.size(1), kv_heads = k.size(1);
  TORCH_CHECK(kv_heads > 0 && q_heads % kv_heads == 0, "query heads (", q_heads,
              ") must be a multiple of kv heads (", kv_heads, ")");
  // LibTorch's fused kernel (flash attention on CPU) never materializes the
  // [batch, heads, q_len, k_len] scores, and repeats kv heads itself.
  std::optional<at::Tensor> mask;
  if (bias.defined()) mask = bias.to(q.scalar_type());
  return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0,
                                          /*is_causal=*/false, scale,
                                          /*enable_gqa=*/kv_heads != q_heads);
}

at::Tensor SplitHeads(const at::Tensor& x, int64_t heads) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) % heads == 0, "cannot split ",
              x.sizes(), " into ", heads, " heads");
  return x.reshape({x.size(0), x.size(1), heads, x.size(2) / heads})
      .transpose(1, 2);
}

at::Tensor MergeHeads(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 4, "heads must be [batch, heads, seq, dim]");
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), -1});
}

}  // namespace castserve::models
