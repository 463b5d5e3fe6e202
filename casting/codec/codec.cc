#include "casting/codec/codec.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "casting/codec/codec_internal.h"
#include "platform/executor.h"

namespace castserve::casting {
namespace {

using internal::KernelTable;

// Chunk boundaries stay on cache lines of every element size.
constexpr int64_t kChunkAlignElements = 64;

bool CpuHasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool CpuHasAvx512() {
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

const KernelTable* TableFor(CodecIsa isa) {
  switch (isa) {
    case CodecIsa::kReference:
      return &internal::ReferenceKernels();
    case CodecIsa::kPortable:
      return &internal::PortableKernels();
    case CodecIsa::kAvx2:
      return internal::Avx2Kernels();
    case CodecIsa::kAvx512:
      return internal::Avx512Kernels();
  }
  return nullptr;
}

absl::StatusOr<const KernelTable*> SelectKernels(const CodecOptions& options) {
  const CodecIsa isa = options.isa.value_or(BestCodecIsa());
  if (!CodecIsaSupported(isa)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "codec kernels ", CodecIsaName(isa), " are not supported here"));
  }
  return TableFor(isa);
}

int NumThreads(int64_t num_elements, const CodecOptions& options) {
  int64_t max_threads = options.max_threads;
  if (max_threads <= 0) {
    max_threads = std::max(1u, std::thread::hardware_concurrency());
  }
  const int64_t min_per_thread =
      std::max<int64_t>(1, options.min_elements_per_thread);
  return static_cast<int>(
      std::clamp<int64_t>(num_elements / min_per_thread, 1, max_threads));
}

// Calls fn(chunk, begin, end) for at most `num_threads` contiguous chunks
// covering [0, count), whose boundaries are multiples of `align`. The calling
// thread runs chunk 0.
using ChunkFn = std::function<void(int chunk, int64_t begin, int64_t end)>;
void ParallelFor(int64_t count, int num_threads, int64_t align,
                 const ChunkFn& fn) {
  if (num_threads <= 1 || count <= align) {
    fn(0, 0, count);
    return;
  }
  int64_t chunk_size = (count + num_threads - 1) / num_threads;
  chunk_size = (chunk_size + align - 1) / align * align;
  std::vector<std::unique_ptr<platform::Thread>> threads;
  int chunk = 1;
  for (int64_t begin = chunk_size; begin < count; begin += chunk_size) {
    const int64_t end = std::min(begin + chunk_size, count);
    threads.push_back(platform::Executor::Default().StartThread(
        [&fn, chunk, begin, end] { fn(chunk, begin, end); }));
    ++chunk;
  }
  fn(0, 0, std::min(chunk_size, count));
  for (std::unique_ptr<platform::Thread>& thread : threads) thread->Join();
}

const uint8_t* Offset(const void* base, int64_t index, ElementType type) {
  return static_cast<const uint8_t*>(base) + index * ElementSizeBytes(type);
}

uint8_t* Offset(void* base, int64_t index, ElementType type) {
  return static_cast<uint8_t*>(base) + index * ElementSizeBytes(type);
}

// The kernels for a conversion between `compute_type` and `format`, once its
// arguments are checked.
absl::StatusOr<const KernelTable*> KernelsFor(
    ElementType compute_type, const void* src, const void* dst,
    int64_t num_elements, int64_t num_rows, StorageFormat format,
    const float* scales, const CodecOptions& options) {
  if (absl::Status status = format.Validate(); !status.ok()) return status;
  if (!IsComputeType(compute_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec compute type must be F32, BF16 or F16, not ",
                     ElementTypeName(compute_type)));
  }
  if (num_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", num_elements));
  }
  if (num_elements > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError("null data pointer");
  }
  if (format.is_scaled() && scales == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("format ", format.ToString(), " needs a scale buffer"));
  }
  if ((format.scaling == Scaling::kPerRow ||
       format.scaling == Scaling::kPerBlock) &&
      (num_rows < 0 || (num_elements > 0 && num_rows == 0) ||
       (num_rows > 0 && num_elements % num_rows != 0))) {
    return absl::InvalidArgumentError(
        absl::StrCat(ScalingName(format.scaling), " scaling: ", num_rows,
                     " rows do not divide ", num_elements, " elements"));
  }
  return SelectKernels(options);
}

// Where a conversion reads and writes, and how many threads it may use.
struct ConvertJob {
  ElementType src_type;
  const void* src;
  ElementType dst_type;
  void* dst;
  int num_threads;
};

void ConvertFlat(const ConvertJob& job, internal::ConvertFn fn,
                 int64_t num_elements, float scale) {
  ParallelFor(num_elements, job.num_threads, kChunkAlignElements,
              [&](int, int64_t begin, int64_t end) {
                fn(Offset(job.src, begin, job.src_type), end - begin, scale,
                   Offset(job.dst, begin, job.dst_type));
              });
}

float ParallelAbsMax(const ConvertJob& job, internal::AbsMaxFn absmax,
                     int64_t num_elements) {
  std::vector<float> partial(job.num_threads, 0.0f);
  ParallelFor(num_elements, job.num_threads, kChunkAlignElements,
              [&](int chunk, int64_t begin, int64_t end) {
                partial[chunk] =
                    absmax(Offset(job.src, begin, job.src_type), end - begin);
              });
  return *std::max_element(partial.begin(), partial.end());
}

// Rows are independent (own absmax, own scale), so threads split by rows.
void EncodePerRow(const ConvertJob& job, const KernelTable& table,
                  int64_t num_elements, int64_t num_rows, float* scales) {
  const int s = static_cast<int>(job.src_type);
  const int d = static_cast<int>(job.dst_type);
  const int64_t row_size = num_rows > 0 ? num_elements / num_rows : 0;
  ParallelFor(
      num_rows, job.num_threads, 1,
      [&](int, int64_t row_begin, int64_t row_end) {
        for (int64_t row = row_begin; row < row_end; ++row) {
          const void* row_src = Offset(job.src, row * row_size, job.src_type);
          scales[row] =
              ScaleForAbsMax(table.absmax[s](row_src, row_size), job.dst_type);
          table.divide[s][d](row_src, row_size, scales[row],
                             Offset(job.dst, row * row_size, job.dst_type));
        }
      });
}

void DecodePerRow(const ConvertJob& job, internal::ConvertFn multiply,
                  int64_t num_elements, int64_t num_rows, const float* scales) {
  const int64_t row_size = num_rows > 0 ? num_elements / num_rows : 0;
  ParallelFor(num_rows, job.num_threads, 1,
              [&](int, int64_t row_begin, int64_t row_end) {
                for (int64_t row = row_begin; row < row_end; ++row) {
                  multiply(Offset(job.src, row * row_size, job.src_type),
                           row_size, scales[row],
                           Offset(job.dst, row * row_size, job.dst_type));
                }
              });
}

// The blocks of a [rows, cols] tensor under format.block_rows x block_cols;
// the last block row and column may be ragged.
struct BlockGrid {
  int64_t rows, cols, block_rows = 1, block_cols = 1, grid_cols = 1;
  int64_t grid_rows_ = 1;

  BlockGrid(StorageFormat format, int64_t num_elements, int64_t num_rows)
      : rows(num_rows), cols(num_rows > 0 ? num_elements / num_rows : 0) {
    // The layout is ScaleGridOf's (casting/storage_format.h).
    const ScaleGrid grid = ScaleGridOf(format, rows, cols, nullptr);
    block_rows = grid.block_rows;
    block_cols = grid.block_cols;
    grid_rows_ = grid.grid_rows;
    grid_cols = grid.grid_cols;
  }
  int64_t grid_rows() const { return grid_rows_; }
  // Elements of column block `b` in each row.
  int64_t Width(int64_t b) const {
    return std::min(block_cols, cols - b * block_cols);
  }
};

// Block rows are independent (own absmax, own scales), so threads split by
// them; each block's absmax spans its rows' segments.
void EncodePerBlock(const ConvertJob& job, const KernelTable& table,
                    const BlockGrid& grid, float* scales) {
  const int s = static_cast<int>(job.src_type);
  const int d = static_cast<int>(job.dst_type);
  ParallelFor(
      grid.grid_rows(), job.num_threads, 1,
      [&](int, int64_t grid_row_begin, int64_t grid_row_end) {
        for (int64_t gr = grid_row_begin; gr < grid_row_end; ++gr) {
          const int64_t row_end =
              std::min(grid.rows, (gr + 1) * grid.block_rows);
          for (int64_t b = 0; b < grid.grid_cols; ++b) {
            const int64_t width = grid.Width(b);
            float absmax = 0.0f;
            for (int64_t r = gr * grid.block_rows; r < row_end; ++r) {
              const int64_t at = r * grid.cols + b * grid.block_cols;
              absmax = std::max(
                  absmax,
                  table.absmax[s](Offset(job.src, at, job.src_type), width));
            }
            const float scale = ScaleForAbsMax(absmax, job.dst_type);
            scales[gr * grid.grid_cols + b] = scale;
            for (int64_t r = gr * grid.block_rows; r < row_end; ++r) {
              const int64_t at = r * grid.cols + b * grid.block_cols;
              table.divide[s][d](Offset(job.src, at, job.src_type), width,
                                 scale, Offset(job.dst, at, job.dst_type));
            }
          }
        }
      });
}

// Each row is its column blocks' segments, each decoded with its block's
// scale by the (SIMD) multiply kernel; threads split by rows.
void DecodePerBlock(const ConvertJob& job, internal::ConvertFn multiply,
                    const BlockGrid& grid, const float* scales) {
  ParallelFor(grid.rows, job.num_threads, 1,
              [&](int, int64_t row_begin, int64_t row_end) {
                for (int64_t r = row_begin; r < row_end; ++r) {
                  const float* row_scales =
                      scales + (r / grid.block_rows) * grid.grid_cols;
                  for (int64_t b = 0; b < grid.grid_cols; ++b) {
                    const int64_t at = r * grid.cols + b * grid.block_cols;
                    multiply(Offset(job.src, at, job.src_type), grid.Width(b),
                             row_scales[b], Offset(job.dst, at, job.dst_type));
                  }
                }
              });
}

}  // namespace

absl::string_view CodecIsaName(CodecIsa isa) {
  switch (isa) {
    case CodecIsa::kReference:
      return "reference";
    case CodecIsa::kPortable:
      return "portable";
    case CodecIsa::kAvx2:
      return "avx2";
    case CodecIsa::kAvx512:
      return "avx512";
  }
  return "invalid";
}

bool CodecIsaSupported(CodecIsa isa) {
  if (TableFor(isa) == nullptr) return false;
  if (isa == CodecIsa::kAvx2) return CpuHasAvx2();
  if (isa == CodecIsa::kAvx512) return CpuHasAvx512();
  return true;
}

CodecIsa BestCodecIsa() {
  static const CodecIsa best = [] {
    if (CodecIsaSupported(CodecIsa::kAvx512)) return CodecIsa::kAvx512;
    if (CodecIsaSupported(CodecIsa::kAvx2)) return CodecIsa::kAvx2;
    return CodecIsa::kPortable;
  }();
  return best;
}

float ScaleForAbsMax(float absmax, ElementType fp8_type) {
  if (!(absmax > 0.0f) || !std::isfinite(absmax)) return 1.0f;
  return std::max(absmax / Fp8MaxFinite(fp8_type), FLT_MIN);
}

absl::Status Encode(ElementType src_type, const void* src, int64_t num_elements,
                    int64_t num_rows, StorageFormat format, void* dst,
                    float* dst_scales, const CodecOptions& options) {
  absl::StatusOr<const KernelTable*> table = KernelsFor(
      src_type, src, dst, num_elements, num_rows, format, dst_scales, options);
  if (!table.ok()) return table.status();
  const int s = static_cast<int>(src_type);
  const int d = static_cast<int>(format.element);
  const int num_threads = NumThreads(num_elements, options);
  const ConvertJob job{src_type, src, format.element, dst, num_threads};
  switch (format.scaling) {
    case Scaling::kNone:
      ConvertFlat(job, (*table)->plain[s][d], num_elements, 1.0f);
      break;
    case Scaling::kPerTensor:
      dst_scales[0] =
          ScaleForAbsMax(ParallelAbsMax(job, (*table)->absmax[s], num_elements),
                         format.element);
      ConvertFlat(job, (*table)->divide[s][d], num_elements, dst_scales[0]);
      break;
    case Scaling::kPerRow:
      EncodePerRow(job, **table, num_elements, num_rows, dst_scales);
      break;
    case Scaling::kPerBlock:
      EncodePerBlock(job, **table, BlockGrid(format, num_elements, num_rows),
                     dst_scales);
      break;
  }
  return absl::OkStatus();
}

absl::Status Decode(StorageFormat format, const void* src,
                    const float* src_scales, int64_t num_elements,
                    int64_t num_rows, ElementType dst_type, void* dst,
                    const CodecOptions& options) {
  absl::StatusOr<const KernelTable*> table = KernelsFor(
      dst_type, src, dst, num_elements, num_rows, format, src_scales, options);
  if (!table.ok()) return table.status();
  const int s = static_cast<int>(format.element);
  const int d = static_cast<int>(dst_type);
  const ConvertJob job{format.element, src, dst_type, dst,
                       NumThreads(num_elements, options)};
  switch (format.scaling) {
    case Scaling::kNone:
      ConvertFlat(job, (*table)->plain[s][d], num_elements, 1.0f);
      break;
    case Scaling::kPerTensor:
      ConvertFlat(job, (*table)->multiply[s][d], num_elements, src_scales[0]);
      break;
    case Scaling::kPerRow:
      DecodePerRow(job, (*table)->multiply[s][d], num_elements, num_rows,
                   src_scales);
      break;
    case Scaling::kPerBlock:
      DecodePerBlock(job, (*table)->multiply[s][d],
                     BlockGrid(format, num_elements, num_rows), src_scales);
      break;
  }
  return absl::OkStatus();
}

absl::Status DecodeGuarded(ElementType src_type, const void* src,
                           int64_t num_elements, ElementType dst_type,
                           void* dst, ReadGuard guard,
                           const CodecOptions& options) {
  const StorageFormat format = StorageFormat::Plain(src_type);
  absl::StatusOr<const KernelTable*> table =
      KernelsFor(dst_type, src, dst, num_elements, /*num_rows=*/1, format,
                 nullptr, options);
  if (!table.ok()) return table.status();
  const internal::ConvertFn convert =
      (*table)->plain[static_cast<int>(src_type)][static_cast<int>(dst_type)];
  const int num_threads = NumThreads(num_elements, options);
  std::vector<absl::Status> statuses(num_threads);
  ParallelFor(num_elements, num_threads, kChunkAlignElements,
              [&](int chunk, int64_t begin, int64_t end) {
                const uint8_t* chunk_src = Offset(src, begin, src_type);
                uint8_t* chunk_dst = Offset(dst, begin, dst_type);
                const int64_t count = end - begin;
                statuses[chunk] =
                    guard(chunk_src, count * ElementSizeBytes(src_type),
                          [&] { convert(chunk_src, count, 1.0f, chunk_dst); });
              });
  for (absl::Status& status : statuses) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status EncodeGuarded(ElementType src_type, const void* src,
                           int64_t num_elements, int64_t num_rows,
                           StorageFormat format, void* dst, float* dst_scales,
                           ReadGuard guard, const CodecOptions& options) {
  if (format.scaling != Scaling::kNone && format.scaling != Scaling::kPerRow) {
    return absl::InvalidArgumentError(
        absl::StrCat("a guarded encode takes formats whose rows encode on "
                     "their own, not ",
                     format.ToString()));
  }
  absl::StatusOr<const KernelTable*> table = KernelsFor(
      src_type, src, dst, num_elements, num_rows, format, dst_scales, options);
  if (!table.ok()) return table.status();
  const int s = static_cast<int>(src_type);
  const int d = static_cast<int>(format.element);
  const internal::ConvertFn plain = (*table)->plain[s][d];
  const internal::ConvertFn divide = (*table)->divide[s][d];
  const internal::AbsMaxFn absmax = (*table)->absmax[s];
  const bool per_row = format.scaling == Scaling::kPerRow;
  const int64_t row_size = num_rows > 0 ? num_elements / num_rows : 0;
  const int num_threads = NumThreads(num_elements, options);
  std::vector<absl::Status> statuses(num_threads);
  ParallelFor(
      num_rows, num_threads, 1,
      [&](int chunk, int64_t row_begin, int64_t row_end) {
        const uint8_t* chunk_src = Offset(src, row_begin * row_size, src_type);
        const int64_t count = (row_end - row_begin) * row_size;
        statuses[chunk] =
            guard(chunk_src, count * ElementSizeBytes(src_type), [&] {
              if (!per_row) {
                plain(chunk_src, count, 1.0f,
                      Offset(dst, row_begin * row_size, format.element));
                return;
              }
              for (int64_t row = row_begin; row < row_end; ++row) {
                const uint8_t* row_src = Offset(src, row * row_size, src_type);
                dst_scales[row] =
                    ScaleForAbsMax(absmax(row_src, row_size), format.element);
                divide(row_src, row_size, dst_scales[row],
                       Offset(dst, row * row_size, format.element));
              }
            });
      });
  for (absl::Status& status : statuses) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace castserve::casting
