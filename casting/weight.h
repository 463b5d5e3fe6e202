// Weight: one tensor of a checkpoint through its lifecycle
// (docs/ARCHITECTURE.md, "The weight lifecycle"): source + storage + compute.
//
// - source: a checkpoint entry inside a mapped file. Creating a Weight reads
//   nothing.
// - storage, between forwards: kMapped (the file's pages are the storage) or
//   kResident (a copy in a StorageFormat, made by Materialize at load, or by
//   the first Acquire).
// - compute, during a forward: the weight decoded into the compute dtype,
//   either kCached (kept after first use: the lazy upcast of an mmap'd state
//   dict) or kTransient (freed when its last user releases it: layerwise
//   casting).
//
// A resident copy whose format is the compute dtype, unscaled, *is* the
// compute copy: Acquire hands out the storage tensor itself, so skipped
// modules cost one copy, not two. Likewise integer and bool tensors (token
// type ids, position ids) are passed through in their own dtype, uncast.
//
// Concurrent users share one compute copy, reference-counted: Acquire while a
// copy exists returns it without decoding again; concurrent first Acquires
// wait for one decode. Reads from the mapping go through Checkpoint's guarded
// reads (CopyTo, DecodeTo), so a file truncated under the daemon turns into a
// DATA_LOSS error for this weight, never a crash.
//
// Devices (WeightOptions::device): compute copies are made on the model's
// device. Resident storage lives there too, or, with storage_on_host (a
// CUDA model larger than the GPU), in pinned host memory; mapped storage is
// the file's pages in host memory. Storage is encoded on the host and
// copied to the device once. Every decode, copy and transfer to the device
// goes through casting/device/device_codec.h: on CUDA, castserve's CUDA kernels
// into tensors from the caching allocator, enqueued on the calling thread's
// current stream, with host sources staged through pinned memory. Acquire
// declares the compute copy used on the caller's current stream
// (RecordOnCurrentStream), so a copy prefetched on a side stream is not
// reused early; the caller orders that stream after the prefetch's
// (casting/device/side_stream.h). Transient/cached semantics, pass-through and
// scaled formats are the same on every device. On CUDA the buffer pool is
// not used (the caching allocator reuses freed copies) and WeightActivity's
// times are those of enqueueing the work, not of the device running it.
//
// Products may also read the storage itself instead of a compute copy
// (ReadStorage, used by models/kernels/storage_product.h): no copy is made, and
// the view names the bytes, the format and the scales a kernel needs.
//
// Thread safety: all methods are safe to call concurrently. The Weight must
// outlive every ComputeHandle and StorageView it handed out.
#ifndef CASTSERVE_CASTING_WEIGHT_H_
#define CASTSERVE_CASTING_WEIGHT_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "casting/device/device.h"
#include "casting/formats/checkpoint.h"
#include "casting/memory/buffer_pool.h"
#include "casting/memory/footprint.h"
#include "casting/memory/weight_tier.h"

namespace castserve::casting {

enum class Residency {
  kMapped,    // Storage is the mapped file; compute copies decode from it.
  kResident,  // Storage is a copy in WeightOptions::storage.
};

enum class ComputeCopyPolicy {
  kCached,     // The compute copy stays after first use.
  kTransient,  // The compute copy is freed when its last user releases it.
};

struct WeightOptions {
  Residency residency = Residency::kResident;
  // Format of the resident copy; ignored for kMapped, whose storage format
  // is the checkpoint's dtype (or, pre-quantized, `storage` itself).
  StorageFormat storage = StorageFormat::Plain(ElementType::kF32);
  // Non-empty: the entry is pre-quantized
  // (models/loading/prequantized_weights.h): it holds `storage`'s fp8 elements
  // as they are, and the checkpoint entry named here holds their scales (F32,
  // BF16 or F16, storage.NumScales of the entry's shape elements, in the layout
  // of casting/codec/storage_format.h). The storage is then the file's bytes,
  // mapped or a resident copy of them as `residency` says, never re-encoded;
  // the scales are read once, as f32, at first use.
  std::string scales_entry;
  // F32, F16 or BF16.
  ElementType compute_dtype = ElementType::kF32;
  ComputeCopyPolicy compute_copy = ComputeCopyPolicy::kCached;
  CodecOptions codec;
  // Integer and bool tensors (token type ids, position ids) pass through
  // uncast. False makes them an error like any dtype the codec cannot read:
  // a layer's parameters must be floating (models/loading/weight_factory.h).
  bool pass_through_integers = true;
  // Where compute copies are made: the model's device.
  Device device;
  // With a CUDA device: keep resident storage in pinned host memory and copy
  // it to the device for each compute copy, instead of in device memory.
  // Ignored on the CPU.
  bool storage_on_host = false;
  // With transient copies on the CPU: where compute copies come from and go
  // back to. Null allocates each one anew. Typically one pool per model. (A
  // mapped tensor decodes straight from the mapping; encoding resident copies
  // and gathering rows stage through a reused per-thread 8 MiB buffer, not the
  // pool.)
  std::shared_ptr<BufferPool> buffer_pool;
};

// The lazy work a weight has done since it was created (cumulative; sums
// over a model's weights with +=). A "materialization" makes a copy of the
// weight in memory: the resident storage copy (read from the checkpoint and
// encoded; once per weight) or a compute copy (decoded from the mapping or
// from the resident storage; once when cached, per use when transient). A
// resident copy that doubles as the compute copy counts as storage only.
struct WeightActivity {
  int64_t storage_materializations = 0;
  int64_t storage_bytes = 0;  // Bytes of the copies made.
  absl::Duration storage_time;
  int64_t compute_materializations = 0;
  int64_t compute_bytes = 0;
  absl::Duration compute_time;
  // The part of compute_bytes made as transient copies (freed after use).
  int64_t transient_compute_bytes = 0;
  // Views of the storage handed out (ReadStorage): products that read the
  // stored elements instead of a compute copy.
  int64_t storage_reads = 0;

  WeightActivity& operator+=(const WeightActivity& other);
};

// A weight's stored elements as a product kernel reads them, without a
// compute copy (Weight::ReadStorage). Host memory only.
struct StorageView {
  // rows x cols elements of format.element, row-major and contiguous, at
  // any alignment (a mapped tensor sits where the file put it).
  const uint8_t* data = nullptr;
  StorageFormat format;
  int64_t rows = 0;  // Dim 0 (1 for a scalar).
  int64_t cols = 0;  // The product of the other dims.
  ScaleGrid scales;  // Unscaled unless format.is_scaled().
  // True when `data` is inside a file mapping: read it only under
  // casting::ReadFromMapping (safe_copy.h), since a file truncated under the
  // daemon raises SIGBUS there.
  bool mapped = false;
  // Keep resident storage and scales alive while the view is in use.
  at::Tensor data_owner;
  at::Tensor scales_owner;

  int64_t size_bytes() const {
    return rows * cols * format.element_size_bytes();
  }
};

// Memory a demotion took out of weights and modules while it held forwards
// off, freed when this object is destroyed. Model::Demote destroys it after
// it lets forwards in again: returning a large weight's pages to the system
// takes far longer than taking them out (about a tenth of a second per GB).
class ReleasedMemory {
 public:
  ReleasedMemory() = default;
  ReleasedMemory(const ReleasedMemory&) = delete;
  ReleasedMemory& operator=(const ReleasedMemory&) = delete;

  void Add(at::Tensor tensor);
  // The view's owners (the view itself is destroyed now).
  void Add(std::unique_ptr<StorageView> view);
  void Add(std::shared_ptr<const void> other);

  // Bytes of the tensors held (a module's own objects are not counted),
  // each storage once.
  int64_t tensor_bytes() const;

 private:
  std::vector<at::Tensor> tensors_;
  std::vector<std::shared_ptr<const void>> others_;
};

class Weight;

// One user's hold on a weight's compute copy. Movable, not copyable;
// destroying (or Reset) releases the hold.
class ComputeHandle {
 public:
  ComputeHandle() = default;
  ComputeHandle(ComputeHandle&& other) noexcept;
  ComputeHandle& operator=(ComputeHandle&& other) noexcept;
  ~ComputeHandle();

  // The weight in the compute dtype, with the checkpoint's shape. Valid while
  // the handle holds it; do not keep it past Reset.
  const at::Tensor& tensor() const { return tensor_; }
  void Reset();

 private:
  friend class Weight;
  ComputeHandle(Weight* weight, at::Tensor tensor)
      : weight_(weight), tensor_(std::move(tensor)) {}

  Weight* weight_ = nullptr;
  at::Tensor tensor_;
};

class Weight {
 public:
  // `entry_name` must name a tensor of `checkpoint`. InvalidArgument for an
  // unknown name, a compute dtype that is not F32/F16/BF16, an invalid
  // storage format, or a source dtype the codec cannot read (F64, complex,
  // sub-byte floats; integers unless options.pass_through_integers); for a
  // pre-quantized entry (options.scales_entry), naming the tensor, when the
  // scales entry is missing, not F32/BF16/F16 or of the wrong element count,
  // or the entry's dtype is not the storage format's fp8 element. Reads no
  // tensor data.
  static absl::StatusOr<std::unique_ptr<Weight>> Create(
      std::shared_ptr<const Checkpoint> checkpoint,
      absl::string_view entry_name, WeightOptions options);

  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;

  const std::string& name() const { return entry_.name; }
  const std::vector<int64_t>& shape() const { return entry_.shape; }
  const WeightOptions& options() const { return options_; }

  // The compute dtype's tensor for one user, decoding it if no copy exists
  // (and making the resident storage first if that has not happened).
  // DATA_LOSS if the checkpoint file was truncated; the weight stays usable
  // for a later retry.
  absl::StatusOr<ComputeHandle> Acquire() ABSL_LOCKS_EXCLUDED(mu_);

  // Rows `row_ids` (an integer tensor, each id in [0, shape()[0])) in the
  // compute dtype, shaped [row_ids.numel(), shape()[1:]...], decoding only
  // those rows: what an embedding lookup needs from a transient weight,
  // instead of a compute copy of the whole table. Reads the rows from the
  // mapping, or from the resident storage (made first if missing); uses
  // the compute copy when one exists. Counts as a compute materialization
  // of the gathered bytes. OutOfRange for an id outside the rows.
  absl::StatusOr<at::Tensor> GatherRows(const at::Tensor& row_ids)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The stored elements themselves, for a product that reads them instead of
  // a compute copy (models/kernels/storage_product.h): the mapping (kMapped,
  // or a cool weight serving mapped) or the resident storage, made first if
  // missing (kResident). Counts a storage_read; makes no compute copy. The
  // view is built by the first call and lives as long as the weight (until
  // Demote(kCool)); later calls return it without taking the weight's lock.
  // FailedPrecondition on a device other than the CPU or with storage_on_host,
  // or for integer tensors passed through; DATA_LOSS as Acquire (a later call
  // tries again).
  absl::StatusOr<const StorageView*> ReadStorage() ABSL_LOCKS_EXCLUDED(mu_);

  // The format the elements are stored in between forwards:
  // options().storage when resident, the checkpoint's dtype (plain) when
  // mapped; nullopt for integer tensors passed through.
  std::optional<StorageFormat> storage_format() const;

  // Makes the resident storage copy now (eager load). No-op when mapped or
  // already resident.
  absl::Status Materialize() ABSL_LOCKS_EXCLUDED(mu_);

  // Hint that the weight is needed soon: starts readahead of its source
  // pages (madvise WILLNEED) if they will still be read.
  void AdviseWillNeed() const ABSL_LOCKS_EXCLUDED(mu_);

  // Decodes the compute copy now, typically on a prefetch thread, so that
  // the next Acquire finds it. A transient copy made this way lives until
  // that user releases it. Never throws: the prefetch thread runs outside
  // any forward's exception handler, so what LibTorch throws here (an
  // allocation that fails: RESOURCE_EXHAUSTED) is returned as a status; the
  // module's own Acquire meets the same error inside its forward.
  absl::Status PrefetchCompute() ABSL_LOCKS_EXCLUDED(mu_);

  // Frees what `tier` keeps no longer: the cached compute copy below kHot;
  // also the resident storage copy, its scales and the storage view at
  // kCool. Nothing else changes: the next use builds them again from the
  // source as the first use did (bitwise the same compute copies and
  // stored elements), and from then on the weight keeps what its options
  // configure — a demoted weight promotes itself as it is used.
  // FailedPrecondition, freeing nothing, while a compute copy is held (a
  // ComputeHandle alive). The caller's contract, not checked: no StorageView
  // from ReadStorage is in use (kCool frees it), i.e. no forward runs on the
  // weight's model. With `released`, what it frees goes there instead, to be
  // freed when the caller destroys it (ReleasedMemory).
  absl::Status Demote(WeightTier tier, ReleasedMemory* released = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // True when this weight, demoted to kCool, serves from its mapped source
  // until it is promoted, instead of making its resident storage on first
  // use: a resident weight on the CPU whose storage is the source's bytes as
  // they are (the checkpoint's own dtype, or a pre-quantized entry), or F32
  // storage computed in f32 from a BF16/F16 source (exact widening). Products
  // that read storage then read the mapping (a StorageView in the file's
  // format); compute copies and gathered rows decode from it, bitwise as
  // from the resident copy. A weight stored in its compute dtype still makes
  // its storage on the request path when a product needs a compute copy
  // (more rows than a storage product takes), as the resident copy doubles
  // as that copy.
  bool ServesMappedWhenCool() const;

  // Builds back, here and now, what `tier` keeps and a demotion freed: the
  // resident storage (kWarm and kHot), and a cached compute copy (kHot) if a
  // demotion dropped one (not one no forward made: products of few rows read
  // the storage, and the first larger one makes the copy, as after a load).
  // What a forward would otherwise build on first use, run off the request path
  // (server/servables/model_tier.h): a forward that needs this weight
  // meanwhile waits for its storage only; the cached copy is decoded outside
  // the weight's lock, so reads of the storage (small products, embedding
  // rows) go on beside it. From then on products read the resident storage,
  // not the mapping. The caller holds demotions off. Never throws (as
  // PrefetchCompute).
  absl::Status Promote(WeightTier tier) ABSL_LOCKS_EXCLUDED(mu_);

  // True while a cool weight serves from its mapped source (above). Takes
  // no lock.
  bool serving_mapped() const { return serving_mapped_.load(); }

  // Bytes by state, as now.
  Footprint footprint() const ABSL_LOCKS_EXCLUDED(mu_);

  // What the weight holds once it serves (its configured footprint), from
  // the checkpoint header and the options alone; reads no data and takes no
  // lock. Mapped: the entry's bytes as mapped, plus the compute copy. Resident:
  // the storage copy in its format (scales included), plus the compute copy
  // unless the storage doubles as it. The compute copy counts as cached or,
  // with transient copies, as transient: the bytes one copy takes while it is
  // in use (models/loading/configured_footprint.h bounds how many are in use at
  // once). footprint() after Materialize and an Acquire that still holds
  // its handle equals this.
  Footprint ConfiguredFootprint() const;

  // True while a compute copy exists (Acquire would not decode).
  bool has_compute_copy() const ABSL_LOCKS_EXCLUDED(mu_);

  // How many times a compute copy was built (decoded or copied) so far,
  // including a resident copy that doubles as the compute copy.
  int64_t compute_builds() const ABSL_LOCKS_EXCLUDED(mu_);

  // The materializations done so far.
  WeightActivity activity() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class ComputeHandle;

  Weight(std::shared_ptr<const Checkpoint> checkpoint, TensorEntry entry,
         const TensorEntry* scales_entry, WeightOptions options,
         bool passthrough);

  void Release() ABSL_LOCKS_EXCLUDED(mu_);

  // Makes the resident storage copy if it is missing, counting it.
  absl::Status MaterializeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the resident storage copy (storage_, scales_).
  absl::Status MakeStorageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Encode the source into `storage` (and `scales`, sized for the format):
  // straight from the mapping (plain or per-row formats from an f32/f16/bf16
  // source), or from a whole-tensor copy of it.
  absl::Status EncodeFromSourceByRows(ElementType source_type,
                                      at::Tensor& storage,
                                      at::Tensor& scales) const;
  absl::Status EncodeFromWholeSource(ElementType source_type,
                                     at::Tensor& storage,
                                     at::Tensor& scales) const;
  absl::Status EnsureComputeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `compute`, built since `start`, the compute copy, and counts it.
  void InstallComputeLocked(at::Tensor compute, absl::Time start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The source copied into an aligned host tensor of the checkpoint's shape
  // (pinned staging for a CUDA device); `dtype` must be the entry's own
  // (safe against truncation).
  absl::StatusOr<at::Tensor> ReadSource(at::ScalarType dtype) const;
  // A tensor on the device for a compute copy: from the buffer pool when
  // there is one (CPU only), else a new allocation. Recycle gives it back.
  // PoolsBuffers: a pool is used (transient copies on the CPU).
  bool PoolsBuffers() const;
  at::Tensor NewBuffer(at::ScalarType dtype, at::IntArrayRef shape) const;
  void Recycle(at::Tensor buffer) const;
  absl::StatusOr<at::Tensor> DecodeFromSource() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A compute copy of `storage` and `scales` (this weight's, or a snapshot
  // of them taken under the lock).
  absl::StatusOr<at::Tensor> DecodeFromStorage(const at::Tensor& storage,
                                               const at::Tensor& scales) const;
  bool prequantized() const { return scales_entry_ != nullptr; }
  // Reads the pre-quantized source's scales into scales_ (f32, flat, on
  // the storage device) unless done.
  absl::Status LoadSourceScalesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pre-quantized mapped source decoded (the fp8 bytes through staging).
  absl::StatusOr<at::Tensor> DecodePrequantizedSource() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows `ids` (long, on the host) of the mapped source decoded on the host,
  // then moved to the device.
  absl::StatusOr<at::Tensor> GatherSourceRows(const at::Tensor& ids) const;
  // Decodes row `row` of the mapped source into `dst` (one row of the
  // compute dtype, host memory).
  absl::Status DecodeSourceRow(int64_t row, void* dst) const;
  // `host`, a freshly made storage tensor, where storage lives: itself on
  // the CPU, pinned with storage_on_host, else copied to the device.
  at::Tensor PlaceStorage(at::Tensor host) const;
  // ReadStorage's view, made (with the storage or scales it needs) now.
  absl::StatusOr<StorageView> MakeStorageViewLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows `ids` (long, on the storage's device) of the resident storage
  // decoded on the device.
  absl::StatusOr<at::Tensor> GatherStorageRowsLocked(
      const at::Tensor& ids) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows `ids` (long, on the host) of a pre-quantized mapped source: their
  // fp8 codes read from the mapping, decoded on the device.
  absl::StatusOr<at::Tensor> GatherPrequantizedSourceRowsLocked(
      const at::Tensor& ids) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `rows` ([ids.numel(), row] in options_.storage's elements, gathered
  // from the storage or the source) decoded with the scales of rows `ids`.
  absl::StatusOr<at::Tensor> DecodeStoredRowsLocked(const at::Tensor& rows,
                                                    const at::Tensor& ids) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The device resident storage lives on.
  Device StorageDevice() const;
  // True when the resident storage tensor doubles as the compute copy.
  bool StorageIsCompute() const;
  // The resident storage's name in a Footprint: "bf16", "f8_e4m3fn/per_row",
  // the entry's dtype for a passed-through tensor.
  std::string StorageFormatName() const;
  int64_t num_rows() const;

  const std::shared_ptr<const Checkpoint> checkpoint_;
  const TensorEntry entry_;
  // The scales of a pre-quantized entry (inside checkpoint_), else null.
  const TensorEntry* const scales_entry_;
  const WeightOptions options_;
  // Integer/bool tensors: copied verbatim, never cast.
  const bool passthrough_;

  mutable absl::Mutex mu_;
  // Resident storage: the data (in the compute dtype when StorageIsCompute,
  // bytes otherwise) and, for scaled formats, the f32 scales (which a
  // pre-quantized mapped weight also keeps).
  at::Tensor storage_ ABSL_GUARDED_BY(mu_);
  at::Tensor scales_ ABSL_GUARDED_BY(mu_);
  at::Tensor compute_ ABSL_GUARDED_BY(mu_);
  int users_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t compute_builds_ ABSL_GUARDED_BY(mu_) = 0;
  // activity_.storage_reads is storage_reads_ (counted without the lock).
  WeightActivity activity_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> storage_reads_{0};
  // Set by Demote(kCool) when ServesMappedWhenCool, cleared once the
  // resident storage is made again; written under mu_, read by
  // serving_mapped() without it (an embedding asks on every forward).
  std::atomic<bool> serving_mapped_{false};
  // Set by a Demote that dropped a cached compute copy: Promote(kHot) builds
  // one back only then. A copy no forward made (products of few rows read
  // the storage) is not made by a promotion either.
  bool cached_copy_dropped_ ABSL_GUARDED_BY(mu_) = false;
  // ReadStorage's view: built under mu_ on first use, then published;
  // dropped only by Demote(kCool).
  std::unique_ptr<StorageView> owned_storage_view_ ABSL_GUARDED_BY(mu_);
  // The mapped view a cool weight published before its resident storage was
  // made: forwards that loaded it may still read it; dropped by
  // Demote(kCool), which runs with no forward.
  std::unique_ptr<StorageView> retired_storage_view_ ABSL_GUARDED_BY(mu_);
  std::atomic<const StorageView*> storage_view_{nullptr};
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_WEIGHT_H_
