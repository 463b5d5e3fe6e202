#include "models/kernels/storage_product.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

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

bool CpuHasBf16Products() {
  static const bool has = __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512vbmi");
  return has;
}

// The widening kernels of `isa` (avx512 for avx512_bf16).
const internal::ProductKernelTable* WideKernelsFor(ProductIsa isa) {
  switch (isa) {
    case ProductIsa::kAmxBf16:
    case ProductIsa::kAvx512Bf16:
    case ProductIsa::kAvx512:
      return internal::Avx512ProductKernels();
    case ProductIsa::kAvx2:
      return internal::Avx2ProductKernels();
    case ProductIsa::kReference:
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
  if (view.format.is_scaled()) w.scales = view.scales;
  return w;
}

// Runs product(begin, end) over the output features, split over the
// intra-op threads; a mapped weight's rows are read under the SIGBUS guard,
// each thread its own share.
template <class Product>
absl::Status RunProduct(const internal::KernelWeight& w, bool mapped,
                        const Product& product) {
  const int64_t row_bytes =
      w.in_features * casting::ElementSizeBytes(w.element);
  const int64_t grain = std::max<int64_t>(
      8, kMinBytesPerThread / std::max<int64_t>(row_bytes, 1));
  absl::Mutex mu;
  absl::Status first_error;
  at::parallel_for(0, w.out_features, grain, [&](int64_t begin, int64_t end) {
    if (!mapped) {
      product(begin, end);
      return;
    }
    absl::Status status = casting::ReadFromMapping(
        w.data + begin * row_bytes, (end - begin) * row_bytes,
        [&] { product(begin, end); });
    if (!status.ok()) {
      absl::MutexLock lock(&mu);
      if (first_error.ok()) first_error = status;
    }
  });
  absl::MutexLock lock(&mu);
  return first_error;
}

// The most bf16 parts activations of `dtype` need (see the header).
int MaxPartsFor(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return 1;
  if (dtype == at::kHalf) return 2;
  return kF32ComputeParts;
}

// Whether the bf16 products (`vdpbf16ps`) of the avx512_bf16 kernels are
// faster than their widened products (each weight widened through bf16 to
// f32, one FMA per 16 weights and row), by matmul_benchmark's storage table
// (BENCHMARKS.md): with one part always (one instruction per 32 weights and
// row); with more only for E4M3FN at up to kNarrowE4M3MaxRows rows, where
// the table lookups are amortised over fewer products. (E4M3FN has no
// infinity: a stored infinity times a zero part would be NaN.)
bool NarrowMayTake(casting::ElementType element, int parts, int64_t rows) {
  return parts == 1 || (element == casting::ElementType::kF8E4M3FN &&
                        rows <= kNarrowE4M3MaxRows);
}

// Whether the AMX kernels take a product of `rows` rows of `dtype` with
// `w`: a weight type exact in bf16, scales per tensor or row at most, and
// the rows of kAmxMinRows (storage_product.h).
bool AmxTakes(const internal::AmxKernelTable& amx,
              const internal::KernelWeight& w, at::ScalarType dtype,
              int64_t rows) {
  const int64_t min_rows =
      casting::IsFp8(w.element)
          ? kAmxMinRowsFp8
          : (MaxPartsFor(dtype) == 1 ? kAmxMinRows : kAmxMinRowsSplit);
  // Pack gathers with 32-bit offsets of up to 15 rows x 3 parts x
  // in_features bf16 values: wider weights take the avx512_bf16 kernels.
  constexpr int64_t kMaxInFeatures = int64_t{1} << 24;
  return rows >= min_rows && w.in_features <= kMaxInFeatures &&
         amx.product[static_cast<int>(w.element)] != nullptr &&
         (w.scales.data == nullptr || w.scales.block_cols >= w.in_features);
}

// y = x W^T on AMX tiles (AmxTakes): the activations split into the fewest
// bf16 parts that hold them (at most MaxPartsFor(dtype)) and packed once.
// With more than one part, a stored infinity times a zero part is NaN where
// f32 gives an infinity: a feature with a NaN output is computed again by
// `wide` from the f32 activations (a NaN it gives is the reference's too).
absl::Status AmxMultiply(const internal::AmxKernelTable& amx,
                         const internal::NarrowKernelTable& narrow,
                         const internal::ProductKernelTable& wide,
                         const float* x, at::ScalarType dtype, int64_t rows,
                         const internal::KernelWeight& w, bool mapped,
                         float* y) {
  const int64_t k = w.in_features;
  const int max_parts = MaxPartsFor(dtype);
  // The split's column order for a BF16 weight: every column in place.
  internal::KernelWeight in_order;
  in_order.element = casting::ElementType::kBF16;
  in_order.out_features = w.out_features;
  in_order.in_features = k;
  std::vector<uint16_t> planes(rows * max_parts * k);
  const int parts = narrow.split(x, rows, in_order, max_parts, planes.data());
  // Not value-initialised: pack writes every byte (its padding zeros too).
  const std::unique_ptr<uint16_t[]> packed(
      new uint16_t[amx.packed_bytes(rows, parts, k) / 2]);
  amx.pack(planes.data(), parts, rows, k, packed.get());
  const internal::NarrowProductFn product =
      amx.product[static_cast<int>(w.element)];
  const internal::ProductFn exact = wide.product[static_cast<int>(w.element)];
  return RunProduct(w, mapped, [&](int64_t begin, int64_t end) {
    product(packed.get(), parts, rows, w, begin, end, y);
    if (parts == 1) return;
    for (int64_t f = begin; f < end; ++f) {
      for (int64_t r = 0; r < rows; ++r) {
        if (std::isnan(y[r * w.out_features + f])) {
          exact(x, rows, w, f, f + 1, y);
          break;
        }
      }
    }
  });
}

// y = x W^T for x [rows, in] f32: through the AMX kernels when `isa` is
// amx_bf16 and they take this product (AmxTakes); else through the
// avx512_bf16 kernels when `isa` is one of those two and they take this
// weight (bf16 products where NarrowMayTake, else widened through bf16
// where they have such a kernel); else through `wide`.
absl::Status Multiply(ProductIsa isa, const internal::ProductKernelTable& wide,
                      const at::Tensor& x32, at::ScalarType dtype, int64_t rows,
                      const internal::KernelWeight& w, bool mapped, float* y) {
  const float* x = x32.data_ptr<float>();
  const int element = static_cast<int>(w.element);
  const internal::NarrowKernelTable* narrow =
      isa == ProductIsa::kAvx512Bf16 || isa == ProductIsa::kAmxBf16
          ? internal::Avx512Bf16ProductKernels()
          : nullptr;
  if (isa == ProductIsa::kAmxBf16) {
    const internal::AmxKernelTable& amx = *internal::AmxProductKernels();
    if (AmxTakes(amx, w, dtype, rows)) {
      return AmxMultiply(amx, *narrow, wide, x, dtype, rows, w, mapped, y);
    }
  }
  if (narrow != nullptr && narrow->product[element] != nullptr) {
    const int max_parts = MaxPartsFor(dtype);
    if (NarrowMayTake(w.element, max_parts, rows)) {
      std::vector<uint16_t> planes(rows * max_parts * w.in_features);
      const int parts = narrow->split(x, rows, w, max_parts, planes.data());
      const internal::NarrowProductFn product = narrow->product[element];
      return RunProduct(w, mapped, [&](int64_t begin, int64_t end) {
        product(planes.data(), parts, rows, w, begin, end, y);
      });
    }
    if (const internal::ProductFn product = narrow->widened[element]) {
      std::vector<float> permuted(rows * w.in_features);
      narrow->permute(x, rows, w, permuted.data());
      return RunProduct(w, mapped, [&](int64_t begin, int64_t end) {
        product(permuted.data(), rows, w, begin, end, y);
      });
    }
  }
  const internal::ProductFn product = wide.product[element];
  return RunProduct(w, mapped, [&](int64_t begin, int64_t end) {
    product(x, rows, w, begin, end, y);
  });
}

}  // namespace

absl::string_view ProductIsaName(ProductIsa isa) {
  switch (isa) {
    case ProductIsa::kReference:
      return "reference";
    case ProductIsa::kAvx2:
      return "avx2";
    case ProductIsa::kAvx512:
      return "avx512";
    case ProductIsa::kAvx512Bf16:
      return "avx512_bf16";
    case ProductIsa::kAmxBf16:
      return "amx_bf16";
  }
  return "unknown";
}

bool ProductIsaSupported(ProductIsa isa) {
  switch (isa) {
    case ProductIsa::kReference:
      return true;
    case ProductIsa::kAvx2:
      return internal::Avx2ProductKernels() != nullptr &&
             casting::CodecIsaSupported(casting::CodecIsa::kAvx2);
    case ProductIsa::kAvx512:
      return internal::Avx512ProductKernels() != nullptr &&
             casting::CodecIsaSupported(casting::CodecIsa::kAvx512);
    case ProductIsa::kAvx512Bf16:
      return internal::Avx512Bf16ProductKernels() != nullptr &&
             ProductIsaSupported(ProductIsa::kAvx512) && CpuHasBf16Products();
    case ProductIsa::kAmxBf16:
      return internal::AmxProductKernels() != nullptr &&
             ProductIsaSupported(ProductIsa::kAvx512Bf16) &&
             internal::AmxUsable();
  }
  return false;
}

ProductIsa BestProductIsa() {
  static const ProductIsa best = [] {
    for (ProductIsa isa : {ProductIsa::kAmxBf16, ProductIsa::kAvx512Bf16,
                           ProductIsa::kAvx512, ProductIsa::kAvx2}) {
      if (ProductIsaSupported(isa)) return isa;
    }
    return ProductIsa::kReference;
  }();
  return best;
}

void SetStorageProductMaxRows(int64_t rows) {
  max_rows.store(std::max<int64_t>(rows, 0), std::memory_order_relaxed);
}

int64_t StorageProductMaxRows() {
  return max_rows.load(std::memory_order_relaxed);
}

StorageReads StorageReadsOf(const casting::Weight& weight) {
  const casting::WeightOptions& options = weight.options();
  if (!options.device.is_cpu() || weight.shape().size() != 2) {
    return StorageReads::kNever;
  }
  const std::optional<casting::StorageFormat> format = weight.storage_format();
  if (!format.has_value()) return StorageReads::kNever;
  if (options.residency == casting::Residency::kResident &&
      *format == casting::StorageFormat::Plain(options.compute_dtype)) {
    return format->element == casting::ElementType::kF32
               ? StorageReads::kResidentF32
               : StorageReads::kStorageIsCompute;
  }
  return StorageReads::kConverted;
}

bool ReadsStorageFor(const casting::Weight& weight, int64_t rows) {
  return ReadsStorageFor(StorageReadsOf(weight), rows);
}

absl::StatusOr<at::Tensor> StorageProduct(const at::Tensor& x,
                                          const casting::StorageView& weight,
                                          const at::Tensor& bias,
                                          std::optional<Activation> activation,
                                          std::optional<ProductIsa> isa) {
  TORCH_INTERNAL_ASSERT(x.device().is_cpu() && x.dim() >= 1 &&
                        x.size(-1) == weight.cols);
  const ProductIsa chosen = isa.value_or(BestProductIsa());
  if (!ProductIsaSupported(chosen)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "product kernels ", ProductIsaName(chosen), " are not supported here"));
  }
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  const int64_t rows = weight.cols == 0 ? 0 : x32.numel() / weight.cols;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.rows;
  at::Tensor y = at::empty({rows, weight.rows}, x32.options());
  if (weight.cols == 0) {
    y.zero_();
  } else if (rows > 0 && weight.rows > 0) {
    if (absl::Status status = Multiply(
            chosen, *WideKernelsFor(chosen), x32, x.scalar_type(), rows,
            KernelWeightOf(weight), weight.mapped, y.data_ptr<float>());
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
