#include "models/kernels/storage_product.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "casting/formats/safe_copy.h"
#include "models/kernels/storage_product_kernels.h"

namespace castserve::models {
namespace {

std::atomic<int64_t> max_rows{kDefaultStorageProductMaxRows};

// Each thread's share of a product reads at least this many weight bytes,
// so that small products stay on the calling thread.
constexpr int64_t kMinBytesPerThread = int64_t{256} << 10;

const internal::ProductKernelTable* KernelsFor(casting::CodecIsa isa) {
  if (!casting::CodecIsaSupported(isa)) return nullptr;
  switch (isa) {
    case casting::CodecIsa::kAvx512:
      return internal::Avx512ProductKernels();
    case casting::CodecIsa::kAvx2:
      return internal::Avx2ProductKernels();
    case casting::CodecIsa::kReference:
    case casting::CodecIsa::kPortable:
      return &internal::ReferenceProductKernels();
  }
  return nullptr;
}

internal::KernelWeight KernelWeightOf(const casting::StorageView& view) {
  internal::KernelWeight w;
  w.data = view.data;
  w.element = view.format.element;
  w.out_features = view.rows;
  w.in_features = view.cols;
  if (view.format.is_scaled()) {
    w.scales = view.scales.data;
    w.scale_block_rows = view.scales.block_rows;
    w.scale_block_cols = view.scales.block_cols;
    w.scale_grid_cols = view.scales.grid_cols;
  }
  return w;
}

// Runs `product` over the output features, split over the intra-op threads;
// a mapped weight's rows are read under the SIGBUS guard, each thread its
// own share.
absl::Status RunProduct(internal::ProductFn product, const float* x,
                        int64_t rows, const internal::KernelWeight& w,
                        bool mapped, float* y) {
  const int64_t row_bytes =
      w.in_features * casting::ElementSizeBytes(w.element);
  const int64_t grain = std::max<int64_t>(
      8, kMinBytesPerThread / std::max<int64_t>(row_bytes, 1));
  absl::Mutex mu;
  absl::Status first_error;
  at::parallel_for(0, w.out_features, grain, [&](int64_t begin, int64_t end) {
    if (!mapped) {
      product(x, rows, w, begin, end, y);
      return;
    }
    absl::Status status = casting::ReadFromMapping(
        w.data + begin * row_bytes, (end - begin) * row_bytes,
        [&] { product(x, rows, w, begin, end, y); });
    if (!status.ok()) {
      absl::MutexLock lock(&mu);
      if (first_error.ok()) first_error = status;
    }
  });
  absl::MutexLock lock(&mu);
  return first_error;
}

}  // namespace

void SetStorageProductMaxRows(int64_t rows) {
  max_rows.store(std::max<int64_t>(rows, 0), std::memory_order_relaxed);
}

int64_t StorageProductMaxRows() {
  return max_rows.load(std::memory_order_relaxed);
}

bool ReadsStorageFor(const casting::Weight& weight, int64_t rows) {
  const casting::WeightOptions& options = weight.options();
  if (rows > StorageProductMaxRows() || StorageProductMaxRows() == 0 ||
      !options.device.is_cpu() || weight.shape().size() != 2) {
    return false;
  }
  const std::optional<casting::StorageFormat> format = weight.storage_format();
  if (!format.has_value() || format->element == casting::ElementType::kF32) {
    return false;
  }
  const bool storage_is_compute =
      options.residency == casting::Residency::kResident &&
      *format == casting::StorageFormat::Plain(options.compute_dtype);
  if (storage_is_compute) return rows <= kStorageIsComputeMaxRows;
  return options.compute_copy == casting::ComputeCopyPolicy::kTransient;
}

absl::StatusOr<at::Tensor> StorageProduct(
    const at::Tensor& x, const casting::StorageView& weight,
    const at::Tensor& bias, std::optional<Activation> activation,
    std::optional<casting::CodecIsa> isa) {
  TORCH_INTERNAL_ASSERT(x.device().is_cpu() && x.dim() >= 1 &&
                        x.size(-1) == weight.cols);
  const casting::CodecIsa chosen = isa.value_or(casting::BestCodecIsa());
  const internal::ProductKernelTable* kernels = KernelsFor(chosen);
  if (kernels == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("product kernels ", casting::CodecIsaName(chosen),
                     " are not supported here"));
  }
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  const int64_t rows = weight.cols == 0 ? 0 : x32.numel() / weight.cols;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.rows;
  at::Tensor y = at::empty({rows, weight.rows}, x32.options());
  if (weight.cols == 0) {
    y.zero_();
  } else if (rows > 0 && weight.rows > 0) {
    const internal::KernelWeight w = KernelWeightOf(weight);
    if (absl::Status status = RunProduct(
            kernels->product[static_cast<int>(w.element)],
            x32.data_ptr<float>(), rows, w, weight.mapped, y.data_ptr<float>());
        !status.ok()) {
      return status;
    }
  }
  if (bias.defined()) y.add_(bias.to(at::kFloat));
  y = y.view(shape);
  if (x.scalar_type() != at::kFloat) y = y.to(x.scalar_type());
  return activation.has_value() ? Activate(*activation, y) : y;
}

}  // namespace castserve::models
