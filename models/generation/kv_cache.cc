#include "models/generation/kv_cache.h"

#include <ATen/ATen.h>

#include <new>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "models/model.h"

namespace castserve::models {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(
    const KvCacheShape& shape, int64_t capacity) {
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.head_dim <= 0 ||
      capacity <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV cache needs positive sizes; got ", shape.layers,
                     " layers, ", shape.kv_heads, " kv heads, head_dim ",
                     shape.head_dim, ", capacity ", capacity));
  }
  return CatchExceptions([&]() -> absl::StatusOr<std::unique_ptr<KvCache>> {
    std::vector<at::Tensor> keys, values;
    for (int64_t i = 0; i < shape.layers; ++i) {
      keys.push_back(at::empty({1, shape.kv_heads, capacity, shape.head_dim},
                               shape.options));
      values.push_back(at::empty_like(keys.back()));
    }
    return std::unique_ptr<KvCache>(
        new KvCache(std::move(keys), std::move(values), capacity));
  });
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto* side : {&keys_, &values_}) {
    for (const at::Tensor& t : *side) total += t.nbytes();
  }
  return total;
}

PagedKvBlocks SequenceKv::Blocks(int64_t layer, int64_t end) const {
  TORCH_INTERNAL_ASSERT(false, "this KV cache holds no blocks to read");
}

std::pair<at::Tensor, at::Tensor> KvCache::Append(int64_t layer,
                                                  const at::Tensor& keys,
                                                  const at::Tensor& values) {
  Write(layer, keys, values);
  const int64_t end = length_ + keys.size(2);
  return {keys_[layer].narrow(2, 0, end), values_[layer].narrow(2, 0, end)};
}

void KvCache::Write(int64_t layer, const at::Tensor& keys,
                    const at::Tensor& values) {
  TORCH_CHECK(layer >= 0 && layer < static_cast<int64_t>(keys_.size()),
              "KV cache layer ", layer, " out of range");
  const int64_t n = keys.size(2);
  const int64_t end = length_ + n;
  TORCH_CHECK(end <= capacity_, "KV cache of ", capacity_,
              " tokens cannot take ", n, " more after ", length_);
  keys_[layer].narrow(2, length_, n).copy_(keys);
  values_[layer].narrow(2, length_, n).copy_(values);
}

void KvCache::Advance(int64_t n) {
  TORCH_CHECK(n >= 0 && length_ + n <= capacity_, "KV cache of ", capacity_,
              " tokens cannot advance by ", n, " after ", length_);
  length_ += n;
}

}  // namespace castserve::models
