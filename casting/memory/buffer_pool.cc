#include "casting/memory/buffer_pool.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <vector>

namespace castserve::casting {

at::Tensor BufferPool::Take(at::ScalarType dtype, at::IntArrayRef shape) {
  const int64_t numel = c10::multiply_integers(shape);
  c10::Storage storage;
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find({dtype, numel});
    if (it == idle_.end() || it->second.empty()) {
      return at::empty(shape, at::TensorOptions().dtype(dtype));
    }
    storage = std::move(it->second.back());
    it->second.pop_back();
    idle_bytes_ -= static_cast<int64_t>(storage.nbytes());
    ++reuses_;
  }
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(dtype));
  tensor.set_(std::move(storage), /*storage_offset=*/0, shape, strides);
  return tensor;
}

void BufferPool::Give(at::Tensor tensor) {
  if (!tensor.defined() || !tensor.is_contiguous() ||
      tensor.storage_offset() != 0 || tensor.use_count() != 1 ||
      tensor.storage().use_count() != 1 ||
      tensor.nbytes() != tensor.storage().nbytes()) {
    return;  // Shared or a part of a larger buffer: not ours to reuse.
  }
  const int64_t bytes = static_cast<int64_t>(tensor.nbytes());
  absl::MutexLock lock(&mu_);
  std::vector<c10::Storage>& idle =
      idle_[{tensor.scalar_type(), tensor.numel()}];
  if (static_cast<int>(idle.size()) >= options_.max_idle_per_shape ||
      idle_bytes_ + bytes > options_.max_idle_bytes) {
    return;
  }
  idle_bytes_ += bytes;
  idle.push_back(tensor.storage());
}

int64_t BufferPool::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

int64_t BufferPool::reuses() const {
  absl::MutexLock lock(&mu_);
  return reuses_;
}

}  // namespace castserve::casting
