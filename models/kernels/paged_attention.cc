#include "models/kernels/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <vector>

#include "c10/util/Exception.h"
#include "models/kernels/paged_attention_kernels.h"

namespace castserve::models {
namespace {

std::optional<casting::ElementType> ElementOf(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return casting::ElementType::kF32;
    case at::kBFloat16:
      return casting::ElementType::kBF16;
    case at::kHalf:
      return casting::ElementType::kF16;
    default:
      return std::nullopt;
  }
}

internal::PagedAttentionFn KernelFor(casting::CodecIsa isa,
                                     casting::ElementType element) {
  TORCH_INTERNAL_ASSERT(casting::CodecIsaSupported(isa),
                        "paged attention: ISA ", casting::CodecIsaName(isa),
                        " is not supported here");
  switch (isa) {
    case casting::CodecIsa::kAvx512:
      return internal::Avx512PagedAttention(element);
    case casting::CodecIsa::kAvx2:
      return internal::Avx2PagedAttention(element);
    case casting::CodecIsa::kReference:
    case casting::CodecIsa::kPortable:
      return internal::ReferencePagedAttention(element);
  }
  return nullptr;
}

// The block pointers of one sequence as the kernel reads them.
struct SequenceRef {
  std::vector<const uint8_t*> keys;
  std::vector<const uint8_t*> values;
  internal::PagedKvRef kv;
};

SequenceRef RefOf(const PagedQueries& s, int64_t block_tokens) {
  TORCH_INTERNAL_ASSERT(
      s.count > 0 && s.kv.tokens >= s.count &&
          static_cast<int64_t>(s.kv.keys.size()) * block_tokens >=
              s.kv.tokens &&
          s.kv.keys.size() == s.kv.values.size(),
      "paged attention: ", s.count, " queries over ", s.kv.tokens,
      " tokens in ", s.kv.keys.size(), " blocks of ", block_tokens);
  SequenceRef ref;
  for (const void* p : s.kv.keys) {
    ref.keys.push_back(static_cast<const uint8_t*>(p));
  }
  for (const void* p : s.kv.values) {
    ref.values.push_back(static_cast<const uint8_t*>(p));
  }
  ref.kv = {ref.keys.data(), ref.values.data(), s.kv.tokens};
  return ref;
}

}  // namespace

bool PagedAttentionSupports(at::ScalarType dtype) {
  return ElementOf(dtype).has_value();
}

absl::string_view PagedAttentionKernelName() {
  return casting::CodecIsaName(casting::BestCodecIsa());
}

at::Tensor PagedAttention(const at::Tensor& q,
                          const std::vector<PagedQueries>& sequences,
                          const PagedAttentionOptions& options) {
  TORCH_INTERNAL_ASSERT(q.dim() == 4 && q.size(0) == 1 && q.is_cpu(),
                        "paged attention: q must be [1, heads, seq, dim] on "
                        "the CPU, got ",
                        q.sizes());
  if (sequences.empty())
    return at::empty(q.sizes(), q.options().dtype(at::kFloat));
  const PagedKvBlocks& first = sequences[0].kv;
  const std::optional<casting::ElementType> element = ElementOf(first.dtype);
  TORCH_INTERNAL_ASSERT(element.has_value(), "paged attention: kv dtype ",
                        first.dtype);
  internal::PagedAttentionShape shape;
  shape.kv_element = *element;
  shape.q_heads = q.size(1);
  shape.kv_heads = options.kv_heads;
  shape.head_dim = q.size(3);
  shape.block_tokens = first.block_tokens;
  shape.scale = static_cast<float>(options.scale);
  shape.softcap = static_cast<float>(options.softcap);
  shape.sliding_window = options.sliding_window;
  TORCH_INTERNAL_ASSERT(shape.kv_heads > 0 &&
                        shape.q_heads % shape.kv_heads == 0 &&
                        shape.block_tokens > 0);
  const internal::PagedAttentionFn kernel =
      KernelFor(options.isa.value_or(casting::BestCodecIsa()), *element);
  const int64_t total = q.size(2);
  std::vector<SequenceRef> refs;
  refs.reserve(sequences.size());
  for (const PagedQueries& s : sequences) {
    TORCH_INTERNAL_ASSERT(s.offset >= 0 && s.offset + s.count <= total &&
                          s.kv.block_tokens == first.block_tokens &&
                          s.kv.dtype == first.dtype);
    refs.push_back(RefOf(s, shape.block_tokens));
  }
  const at::Tensor q32 = q.to(at::kFloat).contiguous();
  at::Tensor out = at::empty(q32.sizes(), q32.options());
  const float* q_data = q32.const_data_ptr<float>();
  float* out_data = out.mutable_data_ptr<float>();
  const int64_t head_stride = total * shape.head_dim;
  const int64_t kv_heads = shape.kv_heads;
  // One work item per sequence and kv head.
  at::parallel_for(
      0, static_cast<int64_t>(sequences.size()) * kv_heads, 1,
      [&](int64_t begin, int64_t end) {
        std::vector<float> scratch;
        for (int64_t item = begin; item < end; ++item) {
          const PagedQueries& s = sequences[item / kv_heads];
          const SequenceRef& ref = refs[item / kv_heads];
          scratch.resize(internal::ScratchFloats(shape, s.kv.tokens));
          const int64_t rows = s.offset * shape.head_dim;
          kernel(shape, ref.kv, item % kv_heads, q_data + rows, out_data + rows,
                 head_stride, s.count, scratch.data());
        }
      });
  return out;
}

}  // namespace castserve::models
