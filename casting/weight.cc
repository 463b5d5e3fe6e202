#include "casting/weight.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "casting/device/device_codec.h"
#include "casting/device/torch_types.h"

namespace castserve::casting {
namespace {

// LibTorch's type for integer and bool tensors, which pass through uncast.
std::optional<at::ScalarType> PassthroughScalarType(DType dtype) {
  const DtypeKind kind = RowOf(dtype).kind;
  if (kind != DtypeKind::kBool && kind != DtypeKind::kInteger) {
    return std::nullopt;
  }
  return TorchScalarType(dtype);
}

// "F32, F16, BF16, F8_E4M3 or F8_E5M2": the checkpoint dtypes the codec
// reads, in ElementType order.
std::string CodecDTypeNames() {
  std::string names;
  for (int id = 0; id < kNumElementTypes; ++id) {
    const char* separator =
        id == 0 ? "" : (id + 1 == kNumElementTypes ? " or " : ", ");
    absl::StrAppend(&names, separator,
                    RowOf(static_cast<ElementType>(id)).checkpoint_name);
  }
  return names;
}

// This thread's staging buffer for reads from the mapping, grown to at
// least `bytes`: reused, so its pages are faulted in once per thread, not on
// every decode.
absl::Span<uint8_t> Staging(int64_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < bytes) buffer.resize(bytes);
  return absl::MakeSpan(buffer.data(), bytes);
}

absl::Span<uint8_t> BytesOf(at::Tensor& tensor) {
  return {static_cast<uint8_t*>(tensor.data_ptr()),
          static_cast<size_t>(tensor.nbytes())};
}

// The scales entry of pre-quantized `entry`, checked against `options`.
absl::StatusOr<const TensorEntry*> CheckPrequantized(
    const Checkpoint& checkpoint, const TensorEntry& entry,
    const WeightOptions& options) {
  const std::string& name = options.scales_entry;
  const TensorEntry* scales = checkpoint.Find(name);
  if (scales == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", entry.name, "': its scales '", name, "' are missing"));
  }
  if (!options.storage.is_scaled() ||
      RowOf(entry.dtype).element != options.storage.element) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", entry.name, "' has dtype ", DTypeName(entry.dtype),
        ", not the pre-quantized format ", options.storage.ToString()));
  }
  const std::optional<ElementType> scale_type = RowOf(scales->dtype).element;
  if (!scale_type.has_value() || !IsComputeType(*scale_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scales '", name, "' have dtype ",
                     DTypeName(scales->dtype), "; expected F32, BF16 or F16"));
  }
  absl::StatusOr<int64_t> expected = options.storage.NumScales(entry.shape);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", entry.name, "': ", expected.status().message()));
  }
  if (scales->numel() != *expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("scales '", name, "' have ", scales->numel(),
                     " elements; ", options.storage.ToString(), " needs ",
                     *expected, " for weight '", entry.name, "'"));
  }
  return scales;
}

// `work` run outside any forward's exception handler (a prefetch or
// promotion thread): what LibTorch throws (an allocation that fails:
// RESOURCE_EXHAUSTED) becomes a status, prefixed by `what`.
template <typename Work>
absl::Status StatusOfThrowing(absl::string_view what, Work work) {
  try {
    return work();
  } catch (const c10::Error& error) {
    const absl::string_view message = error.what_without_backtrace();
    return absl::Status(IsOutOfMemoryMessage(message)
                            ? absl::StatusCode::kResourceExhausted
                            : absl::StatusCode::kInternal,
                        absl::StrCat(what, ": ", message));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat(what, ": ", error.what()));
  }
}

}  // namespace

WeightActivity& WeightActivity::operator+=(const WeightActivity& other) {
  storage_materializations += other.storage_materializations;
  storage_bytes += other.storage_bytes;
  storage_time += other.storage_time;
  compute_materializations += other.compute_materializations;
  compute_bytes += other.compute_bytes;
  compute_time += other.compute_time;
  transient_compute_bytes += other.transient_compute_bytes;
  storage_reads += other.storage_reads;
  return *this;
}

ComputeHandle::ComputeHandle(ComputeHandle&& other) noexcept
    : weight_(other.weight_), tensor_(std::move(other.tensor_)) {
  other.weight_ = nullptr;
}

ComputeHandle& ComputeHandle::operator=(ComputeHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    weight_ = other.weight_;
    tensor_ = std::move(other.tensor_);
    other.weight_ = nullptr;
  }
  return *this;
}

ComputeHandle::~ComputeHandle() { Reset(); }

void ComputeHandle::Reset() {
  tensor_.reset();
  if (weight_ != nullptr) {
    weight_->Release();
    weight_ = nullptr;
  }
}

absl::StatusOr<std::unique_ptr<Weight>> Weight::Create(
    std::shared_ptr<const Checkpoint> checkpoint, absl::string_view entry_name,
    WeightOptions options) {
  const TensorEntry* entry = checkpoint->Find(entry_name);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight '", entry_name, "' is not in the checkpoint"));
  }
  if (!IsComputeType(options.compute_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", entry_name, "': compute dtype ",
        ElementTypeName(options.compute_dtype), " is not F32, F16 or BF16"));
  }
  if (absl::Status status = options.storage.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight '", entry_name, "': ", status.message()));
  }
  const bool passthrough = options.pass_through_integers &&
                           PassthroughScalarType(entry->dtype).has_value();
  if (!passthrough && !RowOf(entry->dtype).element.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight '", entry_name, "' has dtype ", DTypeName(entry->dtype),
        ", which castserve cannot compute with (floating weights must be ",
        CodecDTypeNames(), ")"));
  }
  const TensorEntry* scales_entry = nullptr;
  if (!options.scales_entry.empty()) {
    absl::StatusOr<const TensorEntry*> scales =
        CheckPrequantized(*checkpoint, *entry, options);
    if (!scales.ok()) return scales.status();
    scales_entry = *scales;
  }
  return std::unique_ptr<Weight>(new Weight(
      std::move(checkpoint), *entry, scales_entry, options, passthrough));
}

Weight::Weight(std::shared_ptr<const Checkpoint> checkpoint, TensorEntry entry,
               const TensorEntry* scales_entry, WeightOptions options,
               bool passthrough)
    : checkpoint_(std::move(checkpoint)),
      entry_(std::move(entry)),
      scales_entry_(scales_entry),
      options_(options),
      passthrough_(passthrough) {}

Device Weight::StorageDevice() const {
  // Integer tables are small and have no codec format to decode from the
  // host: they live on the device.
  const bool on_host = options_.device.is_cuda() && options_.storage_on_host;
  return on_host && !passthrough_ ? Device::Cpu() : options_.device;
}

bool Weight::StorageIsCompute() const {
  return passthrough_ ||
         (StorageDevice() == options_.device && !options_.storage.is_scaled() &&
          options_.storage.element == options_.compute_dtype);
}

int64_t Weight::num_rows() const {
  return entry_.shape.empty() ? 1 : entry_.shape[0];
}

void ReleasedMemory::Add(at::Tensor tensor) {
  if (tensor.defined()) tensors_.push_back(std::move(tensor));
}

void ReleasedMemory::Add(std::unique_ptr<StorageView> view) {
  if (view == nullptr) return;
  Add(std::move(view->data_owner));
  Add(std::move(view->scales_owner));
}

void ReleasedMemory::Add(std::shared_ptr<const void> other) {
  if (other != nullptr) others_.push_back(std::move(other));
}

int64_t ReleasedMemory::tensor_bytes() const {
  std::vector<const void*> seen;
  int64_t bytes = 0;
  const auto count = [&](const at::Tensor& tensor) {
    const void* storage = tensor.storage().unsafeGetStorageImpl();
    if (std::find(seen.begin(), seen.end(), storage) != seen.end()) return;
    seen.push_back(storage);
    bytes += static_cast<int64_t>(tensor.storage().nbytes());
  };
  for (const at::Tensor& tensor : tensors_) count(tensor);
  return bytes;
}

bool Weight::PoolsBuffers() const {
  return options_.buffer_pool != nullptr && options_.device.is_cpu() &&
         options_.compute_copy == ComputeCopyPolicy::kTransient;
}

at::Tensor Weight::NewBuffer(at::ScalarType dtype,
                             at::IntArrayRef shape) const {
  if (PoolsBuffers()) {
    return options_.buffer_pool->Take(dtype, shape);
  }
  return EmptyOn(options_.device, dtype, shape);
}

void Weight::Recycle(at::Tensor buffer) const {
  if (PoolsBuffers()) {
    options_.buffer_pool->Give(std::move(buffer));
  }
}

absl::StatusOr<at::Tensor> Weight::ReadSource(at::ScalarType dtype) const {
  at::Tensor bytes = options_.device.is_cpu()
                         ? NewBuffer(dtype, entry_.shape)
                         : HostStaging(options_.device, dtype, entry_.shape);
  if (absl::Status status = checkpoint_->CopyTo(entry_, BytesOf(bytes));
      !status.ok()) {
    return status;
  }
  return bytes;
}

absl::Status Weight::LoadSourceScalesLocked() {
  if (!prequantized() || scales_.defined()) return absl::OkStatus();
  const ElementType scale_type = *RowOf(scales_entry_->dtype).element;
  at::Tensor raw =
      at::empty({scales_entry_->numel()}, TorchScalarType(scale_type));
  if (absl::Status status = checkpoint_->CopyTo(*scales_entry_, BytesOf(raw));
      !status.ok()) {
    return status;
  }
  at::Tensor scales = at::empty({scales_entry_->numel()}, at::kFloat);
  if (absl::Status status =
          Decode(StorageFormat::Plain(scale_type), raw.data_ptr(), nullptr,
                 raw.numel(), /*num_rows=*/1, ElementType::kF32,
                 scales.data_ptr(), options_.codec);
      !status.ok()) {
    return status;
  }
  scales_ = PlaceStorage(std::move(scales));
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Weight::DecodePrequantizedSource() const {
  absl::StatusOr<at::Tensor> source = ReadSource(at::kByte);
  if (!source.ok()) return source.status();
  at::Tensor compute =
      NewBuffer(TorchScalarType(options_.compute_dtype), entry_.shape);
  if (absl::Status status =
          DecodeTensor(options_.storage, ToDevice(*source, options_.device),
                       ToDevice(scales_, options_.device), num_rows(),
                       options_.compute_dtype, compute, options_.codec);
      !status.ok()) {
    return status;
  }
  return compute;
}

absl::StatusOr<at::Tensor> Weight::DecodeFromSource() const {
  if (prequantized()) return DecodePrequantizedSource();
  const std::optional<at::ScalarType> verbatim =
      passthrough_ ? PassthroughScalarType(entry_.dtype)
      : *RowOf(entry_.dtype).element == options_.compute_dtype
          ? std::optional(TorchScalarType(options_.compute_dtype))
          : std::nullopt;
  if (verbatim.has_value()) {
    absl::StatusOr<at::Tensor> source = ReadSource(*verbatim);
    if (!source.ok()) return source.status();
    return ToDevice(*source, options_.device);
  }
  const ElementType source_type = *RowOf(entry_.dtype).element;
  at::Tensor compute =
      NewBuffer(TorchScalarType(options_.compute_dtype), entry_.shape);
  if (options_.device.is_cpu()) {
    // Straight from the mapping into the compute copy, under the SIGBUS
    // guard: a staging copy (of the whole tensor, or chunk by chunk) costs a
    // memcpy of the source and, for a whole-tensor one, new pages to fault in.
    if (absl::Status status =
            checkpoint_->DecodeTo(entry_, source_type, options_.compute_dtype,
                                  compute.data_ptr(), options_.codec);
        !status.ok()) {
      return status;
    }
    return compute;
  }
  // Another device: the source through pinned staging, decoded there.
  absl::StatusOr<at::Tensor> source = ReadSource(TorchScalarType(source_type));
  if (!source.ok()) return source.status();
  if (absl::Status status = DecodeTensor(
          StorageFormat::Plain(source_type), ToDevice(*source, options_.device),
          at::Tensor(), num_rows(), options_.compute_dtype, compute,
          options_.codec);
      !status.ok()) {
    return status;
  }
  return compute;
}

absl::StatusOr<at::Tensor> Weight::DecodeFromStorage(
    const at::Tensor& storage, const at::Tensor& scales) const {
  at::Tensor compute =
      NewBuffer(TorchScalarType(options_.compute_dtype), entry_.shape);
  absl::Status status = DecodeTensor(
      options_.storage, ToDevice(storage, options_.device),
      scales.defined() ? ToDevice(scales, options_.device) : at::Tensor(),
      num_rows(), options_.compute_dtype, compute, options_.codec);
  if (!status.ok()) return status;
  return compute;
}

absl::StatusOr<at::Tensor> Weight::GatherStorageRowsLocked(
    const at::Tensor& ids) const {
  const int64_t rows_total = num_rows();
  const int64_t row_width = rows_total == 0 ? 0 : storage_.numel() / rows_total;
  return DecodeStoredRowsLocked(
      storage_.view({rows_total, row_width}).index_select(0, ids).contiguous(),
      ids);
}

absl::StatusOr<at::Tensor> Weight::GatherPrequantizedSourceRowsLocked(
    const at::Tensor& ids) const {
  // The fp8 codes of each row, read from the mapping (guarded) into one
  // host tensor; the rest of the table is never touched.
  const int64_t rows_total = num_rows();
  const int64_t row_bytes =
      rows_total == 0 ? 0
                      : static_cast<int64_t>(entry_.size_bytes) / rows_total;
  at::Tensor codes =
      options_.device.is_cpu()
          ? at::empty({ids.numel(), row_bytes}, at::kByte)
          : HostStaging(options_.device, at::kByte, {ids.numel(), row_bytes});
  uint8_t* out = codes.data_ptr<uint8_t>();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (absl::Status status = checkpoint_->CopyRangeTo(
            entry_, id[i] * row_bytes,
            {out + i * row_bytes, static_cast<size_t>(row_bytes)});
        !status.ok()) {
      return status;
    }
  }
  return DecodeStoredRowsLocked(ToDevice(codes, options_.device),
                                ToDevice(ids, options_.device));
}

absl::StatusOr<at::Tensor> Weight::DecodeStoredRowsLocked(
    const at::Tensor& rows, const at::Tensor& ids) const {
  // The gathered rows' scales: each row's own (per row), the one (per
  // tensor), or the grid row of each row's block (per block: the gathered
  // rows are then a per-block tensor of 1-row blocks).
  StorageFormat format = options_.storage;
  at::Tensor scales;
  if (format.scaling == Scaling::kPerRow) {
    scales = scales_.index_select(0, ids.to(scales_.device())).contiguous();
  } else if (format.scaling == Scaling::kPerTensor) {
    scales = scales_;
  } else if (format.scaling == Scaling::kPerBlock) {
    // Ids are in range, so the table has rows.
    const ScaleGrid grid =
        ScaleGridOf(format, num_rows(), entry_.numel() / num_rows(), nullptr);
    const at::Tensor grid_rows =
        at::floor_divide(ids.to(scales_.device()), format.block_rows);
    scales = scales_.view({grid.grid_rows, grid.grid_cols})
                 .index_select(0, grid_rows)
                 .contiguous();
    format.block_rows = 1;
  }
  std::vector<int64_t> shape = entry_.shape;
  shape[0] = ids.numel();
  at::Tensor compute =
      EmptyOn(options_.device, TorchScalarType(options_.compute_dtype), shape);
  absl::Status status = DecodeTensor(
      format, ToDevice(rows, options_.device),
      scales.defined() ? ToDevice(scales, options_.device) : scales,
      ids.numel(), options_.compute_dtype, compute, options_.codec);
  if (!status.ok()) return status;
  return compute;
}

absl::StatusOr<at::Tensor> Weight::GatherSourceRows(
    const at::Tensor& ids) const {
  std::vector<int64_t> shape = entry_.shape;
  shape[0] = ids.numel();
  at::Tensor rows = at::empty(
      shape,
      at::TensorOptions().dtype(TorchScalarType(options_.compute_dtype)));
  const int64_t row_bytes = rows.numel() == 0 ? 0 : rows.nbytes() / ids.numel();
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (absl::Status status = DecodeSourceRow(
            id[i], static_cast<uint8_t*>(rows.data_ptr()) + i * row_bytes);
        !status.ok()) {
      return status;
    }
  }
  return ToDevice(rows, options_.device);
}

absl::Status Weight::DecodeSourceRow(int64_t row, void* dst) const {
  const int64_t row_elements = entry_.numel() / num_rows();
  const ElementType source_type = *RowOf(entry_.dtype).element;
  const int64_t row_bytes = row_elements * ElementSizeBytes(source_type);
  if (source_type == options_.compute_dtype) {
    return checkpoint_->CopyRangeTo(
        entry_, row * row_bytes,
        {static_cast<uint8_t*>(dst), static_cast<size_t>(row_bytes)});
  }
  absl::Span<uint8_t> source = Staging(row_bytes);
  if (absl::Status status =
          checkpoint_->CopyRangeTo(entry_, row * row_bytes, source);
      !status.ok()) {
    return status;
  }
  return Decode(StorageFormat::Plain(source_type), source.data(), nullptr,
                row_elements, /*num_rows=*/1, options_.compute_dtype, dst,
                options_.codec);
}

absl::StatusOr<at::Tensor> Weight::GatherRows(const at::Tensor& row_ids) {
  if (entry_.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight '", entry_.name, "' is a scalar: it has no rows"));
  }
  const at::Tensor ids =
      row_ids.to(at::kCPU).to(at::kLong).contiguous().view({-1});
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (id[i] < 0 || id[i] >= entry_.shape[0]) {
      return absl::OutOfRangeError(
          absl::StrCat("weight '", entry_.name, "': row ", id[i],
                       " is outside its ", entry_.shape[0], " rows"));
    }
  }
  if (ids.numel() == 0) {
    std::vector<int64_t> shape = entry_.shape;
    shape[0] = 0;
    return EmptyOn(options_.device,
                   passthrough_ ? *PassthroughScalarType(entry_.dtype)
                                : TorchScalarType(options_.compute_dtype),
                   shape);
  }
  const at::Tensor device_ids = ToDevice(ids, options_.device);
  absl::MutexLock lock(&mu_);
  if (compute_.defined()) return compute_.index_select(0, device_ids);
  if (passthrough_) {  // Integer tables: small, read whole.
    absl::StatusOr<at::Tensor> table = DecodeFromSource();
    if (!table.ok()) return table.status();
    return table->index_select(0, device_ids);
  }
  // Rows of a cool weight serving mapped come from the source.
  const bool from_storage =
      options_.residency == Residency::kResident && !serving_mapped_;
  if (from_storage) {
    if (absl::Status status = MaterializeLocked(); !status.ok()) return status;
    if (StorageIsCompute()) return storage_.index_select(0, device_ids);
  }
  if (absl::Status status = LoadSourceScalesLocked(); !status.ok()) {
    return status;
  }
  const absl::Time start = absl::Now();
  // Only the gathered rows are read and decoded, whatever the format.
  absl::StatusOr<at::Tensor> gathered =
      from_storage     ? GatherStorageRowsLocked(ToDevice(ids, StorageDevice()))
      : prequantized() ? GatherPrequantizedSourceRowsLocked(ids)
                       : GatherSourceRows(ids);
  if (!gathered.ok()) return gathered.status();
  at::Tensor rows = *std::move(gathered);
  activity_.compute_materializations += 1;
  activity_.compute_bytes += rows.nbytes();
  if (options_.compute_copy == ComputeCopyPolicy::kTransient) {
    activity_.transient_compute_bytes += rows.nbytes();
  }
  activity_.compute_time += absl::Now() - start;
  return rows;
}

absl::Status Weight::MaterializeLocked() {
  if (options_.residency == Residency::kMapped || storage_.defined()) {
    return absl::OkStatus();
  }
  const absl::Time start = absl::Now();
  absl::Status status = MakeStorageLocked();
  if (!status.ok()) return status;
  // Complete before any stream reads it: storage outlives every forward.
  SynchronizeCurrentStream(StorageDevice());
  // The resident copy is read from now on, never the mapping.
  checkpoint_->ReleasePages(entry_);
  if (serving_mapped_) {
    // Forwards that loaded the mapped view may still read it (the pages
    // fault back in from the file); the next ReadStorage publishes the
    // resident one.
    serving_mapped_ = false;
    if (owned_storage_view_ != nullptr) {
      storage_view_.store(nullptr, std::memory_order_release);
      retired_storage_view_ = std::move(owned_storage_view_);
    }
  }
  activity_.storage_materializations += 1;
  activity_.storage_bytes +=
      storage_.nbytes() + (scales_.defined() ? scales_.nbytes() : 0);
  activity_.storage_time += absl::Now() - start;
  return absl::OkStatus();
}

absl::Status Weight::MakeStorageLocked() {
  if (prequantized()) {  // The file's bytes and scales, as they are.
    if (absl::Status status = LoadSourceScalesLocked(); !status.ok()) {
      return status;
    }
    absl::StatusOr<at::Tensor> source = ReadSource(at::kByte);
    if (!source.ok()) return source.status();
    storage_ = PlaceStorage(*std::move(source));
    return absl::OkStatus();
  }
  if (StorageIsCompute()) {
    absl::StatusOr<at::Tensor> compute = DecodeFromSource();
    if (!compute.ok()) return compute.status();
    storage_ = *std::move(compute);
    ++compute_builds_;
    return absl::OkStatus();
  }
  ElementType source_type = *RowOf(entry_.dtype).element;
  if (options_.storage == StorageFormat::Plain(source_type)) {
    // Already in the storage format.
    absl::StatusOr<at::Tensor> source =
        ReadSource(TorchScalarType(source_type));
    if (!source.ok()) return source.status();
    storage_ = PlaceStorage(*std::move(source));
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> data_bytes = options_.storage.DataBytes(entry_.shape);
  absl::StatusOr<int64_t> num_scales = options_.storage.NumScales(entry_.shape);
  if (!data_bytes.ok()) return data_bytes.status();
  if (!num_scales.ok()) return num_scales.status();
  at::Tensor storage = at::empty({*data_bytes}, at::kByte);
  at::Tensor scales;
  if (options_.storage.is_scaled()) {
    scales = at::empty({*num_scales}, at::kFloat);
  }
  // Rows encode independently unless a scale spans several rows.
  absl::Status status =
      IsComputeType(source_type) &&
              (options_.storage.scaling == Scaling::kNone ||
               options_.storage.scaling == Scaling::kPerRow)
          ? EncodeFromSourceByRows(source_type, storage, scales)
          : EncodeFromWholeSource(source_type, storage, scales);
  if (!status.ok()) return status;
  storage_ = PlaceStorage(std::move(storage));
  if (scales.defined()) scales_ = PlaceStorage(std::move(scales));
  return absl::OkStatus();
}

at::Tensor Weight::PlaceStorage(at::Tensor host) const {
  if (options_.device.is_cpu()) return host;
  if (StorageDevice().is_cpu())
    return host.is_pinned() ? host : host.pin_memory();
  return ToDevice(host, options_.device);
}

absl::Status Weight::EncodeFromSourceByRows(ElementType source_type,
                                            at::Tensor& storage,
                                            at::Tensor& scales) const {
  // Straight from the mapping, row by row: no staging copy of the source.
  return checkpoint_->EncodeTo(
      entry_, source_type, options_.storage, storage.data_ptr(),
      scales.defined() ? scales.data_ptr<float>() : nullptr, options_.codec);
}

absl::Status Weight::EncodeFromWholeSource(ElementType source_type,
                                           at::Tensor& storage,
                                           at::Tensor& scales) const {
  absl::StatusOr<at::Tensor> source = ReadSource(TorchScalarType(source_type));
  if (!source.ok()) return source.status();
  if (!IsComputeType(source_type)) {
    // fp8 on disk, another format wanted: go through f32.
    at::Tensor widened = at::empty({entry_.numel()}, at::kFloat);
    absl::Status status =
        Decode(StorageFormat::Plain(source_type), source->data_ptr(), nullptr,
               entry_.numel(), num_rows(), ElementType::kF32,
               widened.data_ptr(), options_.codec);
    if (!status.ok()) return status;
    source = std::move(widened);
    source_type = ElementType::kF32;
  }
  return Encode(source_type, source->data_ptr(), entry_.numel(), num_rows(),
                options_.storage, storage.data_ptr(),
                scales.defined() ? scales.data_ptr<float>() : nullptr,
                options_.codec);
}

absl::Status Weight::EnsureComputeLocked() {
  if (compute_.defined()) return absl::OkStatus();
  if (absl::Status status = LoadSourceScalesLocked(); !status.ok()) {
    return status;
  }
  // A cool weight serving mapped decodes from the source, bitwise as from
  // the resident copy, unless that copy doubles as the compute copy.
  const bool from_source = options_.residency == Residency::kMapped ||
                           (serving_mapped_ && !StorageIsCompute());
  if (!from_source) {
    if (absl::Status status = MaterializeLocked(); !status.ok()) return status;
    if (StorageIsCompute()) {
      compute_ = storage_;
      return absl::OkStatus();
    }
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<at::Tensor> compute =
      from_source ? DecodeFromSource() : DecodeFromStorage(storage_, scales_);
  if (!compute.ok()) return compute.status();
  InstallComputeLocked(*std::move(compute), start);
  return absl::OkStatus();
}

void Weight::InstallComputeLocked(at::Tensor compute, absl::Time start) {
  compute_ = std::move(compute);
  ++compute_builds_;
  if (options_.residency == Residency::kMapped &&
      options_.compute_copy == ComputeCopyPolicy::kCached) {
    // The cached copy is read from now on, never the mapping.
    checkpoint_->ReleasePages(entry_);
  }
  activity_.compute_materializations += 1;
  activity_.compute_bytes += compute_.nbytes();
  activity_.compute_time += absl::Now() - start;
  if (options_.compute_copy == ComputeCopyPolicy::kTransient) {
    activity_.transient_compute_bytes += compute_.nbytes();
  }
}

absl::StatusOr<ComputeHandle> Weight::Acquire() {
  absl::MutexLock lock(&mu_);
  if (absl::Status status = EnsureComputeLocked(); !status.ok()) {
    return status;
  }
  ++users_;
  // The caller computes on its current stream, maybe not the one that made
  // the copy (a prefetch's).
  RecordOnCurrentStream(compute_);
  return ComputeHandle(this, compute_);
}

void Weight::Release() {
  absl::MutexLock lock(&mu_);
  --users_;
  if (users_ == 0 && options_.compute_copy == ComputeCopyPolicy::kTransient &&
      !compute_.is_same(storage_)) {
    Recycle(std::move(compute_));
    compute_.reset();
  }
}

std::optional<StorageFormat> Weight::storage_format() const {
  if (passthrough_) return std::nullopt;
  // A mapped weight's storage is the file's elements: unscaled, unless the
  // checkpoint is pre-quantized (the file's fp8 with its scales).
  if (options_.residency == Residency::kMapped && !prequantized()) {
    return StorageFormat::Plain(*RowOf(entry_.dtype).element);
  }
  return options_.storage;
}

absl::StatusOr<const StorageView*> Weight::ReadStorage() {
  if (passthrough_ || !options_.device.is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight '", entry_.name,
        "': only floating weights on the CPU have a storage view"));
  }
  // Storage is never moved, and dropped only by Demote, while no forward
  // reads it: the view is built on the first call and then handed out
  // without a lock.
  if (const StorageView* view = storage_view_.load(std::memory_order_acquire)) {
    storage_reads_.fetch_add(1, std::memory_order_relaxed);
    return view;
  }
  absl::MutexLock lock(&mu_);
  if (owned_storage_view_ == nullptr) {
    absl::StatusOr<StorageView> view = MakeStorageViewLocked();
    if (!view.ok()) return view.status();
    owned_storage_view_ = std::make_unique<StorageView>(*std::move(view));
    storage_view_.store(owned_storage_view_.get(), std::memory_order_release);
  }
  storage_reads_.fetch_add(1, std::memory_order_relaxed);
  return owned_storage_view_.get();
}

absl::StatusOr<StorageView> Weight::MakeStorageViewLocked() {
  StorageView view;
  // A cool weight serving mapped is read in the file's format.
  view.format = serving_mapped_ && !prequantized()
                    ? StorageFormat::Plain(*RowOf(entry_.dtype).element)
                    : *storage_format();
  view.rows = num_rows();
  view.cols = view.rows == 0 ? 0 : entry_.numel() / view.rows;
  if (options_.residency == Residency::kMapped || serving_mapped_) {
    // A pre-quantized mapped weight's scales are read once, as f32.
    if (absl::Status status = LoadSourceScalesLocked(); !status.ok()) {
      return status;
    }
    view.data = checkpoint_->Bytes(entry_).data();
    view.mapped = true;
  } else {
    if (absl::Status status = MaterializeLocked(); !status.ok()) return status;
    view.data_owner = storage_;
    view.data = static_cast<const uint8_t*>(storage_.data_ptr());
  }
  if (view.format.is_scaled()) {
    TORCH_INTERNAL_ASSERT(scales_.defined() && scales_.is_contiguous() &&
                              scales_.scalar_type() == at::kFloat,
                          "weight '", entry_.name, "': no f32 scales");
    view.scales_owner = scales_;
    view.scales = ScaleGridOf(view.format, view.rows, view.cols,
                              scales_.data_ptr<float>());
    TORCH_INTERNAL_ASSERT(
        view.scales.grid_rows * view.scales.grid_cols == scales_.numel(),
        "weight '", entry_.name, "': ", scales_.numel(), " scales for a ",
        view.scales.grid_rows, "x", view.scales.grid_cols, " grid");
  }
  return view;
}

absl::Status Weight::Materialize() {
  absl::MutexLock lock(&mu_);
  return MaterializeLocked();
}

absl::Status Weight::PrefetchCompute() {
  return StatusOfThrowing(absl::StrCat("prefetch of ", name()), [&] {
    absl::MutexLock lock(&mu_);
    return EnsureComputeLocked();
  });
}

void Weight::AdviseWillNeed() const {
  {
    absl::MutexLock lock(&mu_);
    const bool source_still_read = options_.residency == Residency::kMapped
                                       ? !compute_.defined()
                                       : !storage_.defined();
    if (!source_still_read) return;
  }
  // A hint: failure only loses the readahead.
  (void)checkpoint_->file(entry_.file_index)
      .AdviseWillNeed(entry_.offset_bytes, entry_.size_bytes);
}

absl::Status Weight::Demote(WeightTier tier, ReleasedMemory* released) {
  ReleasedMemory freed_here;  // Freed on return, after the lock.
  if (released == nullptr) released = &freed_here;
  absl::MutexLock lock(&mu_);
  if (users_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight '", entry_.name, "': ", users_,
        " users hold its compute copy; it is demoted only while no forward "
        "uses it"));
  }
  if (tier == WeightTier::kHot) return absl::OkStatus();
  // With no users, a compute copy that is not the storage itself is a
  // cached one, or a transient one a prefetch made: neither is kept below
  // kHot. (A storage that doubles as the compute copy stays with it.)
  if (compute_.defined() && !compute_.is_same(storage_)) {
    if (options_.compute_copy == ComputeCopyPolicy::kCached) {
      cached_copy_dropped_ = true;
    }
    if (PoolsBuffers()) {
      Recycle(std::move(compute_));
    } else {
      released->Add(std::move(compute_));
    }
  }
  compute_.reset();
  if (tier == WeightTier::kWarm) return absl::OkStatus();
  storage_view_.store(nullptr, std::memory_order_release);
  released->Add(std::move(owned_storage_view_));
  released->Add(std::move(retired_storage_view_));
  released->Add(std::move(storage_));  // Leaves it undefined.
  released->Add(std::move(scales_));
  serving_mapped_ = ServesMappedWhenCool();
  return absl::OkStatus();
}

bool Weight::ServesMappedWhenCool() const {
  if (passthrough_ || options_.residency != Residency::kResident ||
      !options_.device.is_cpu()) {
    return false;
  }
  if (prequantized()) return true;
  const ElementType source = *RowOf(entry_.dtype).element;
  if (options_.storage == StorageFormat::Plain(source)) return true;
  // F32 storage widened exactly from a bf16 or f16 file and computed in f32:
  // a storage product of the mapped elements widens them in registers to
  // the same f32 values and sums them in the same order
  // (models/kernels/storage_product.h), so it reads the mapping too.
  return options_.storage == StorageFormat::Plain(ElementType::kF32) &&
         options_.compute_dtype == ElementType::kF32 &&
         (source == ElementType::kBF16 || source == ElementType::kF16);
}

absl::Status Weight::Promote(WeightTier tier) {
  if (tier == WeightTier::kCool) return absl::OkStatus();
  return StatusOfThrowing(absl::StrCat("promotion of ", name()), [&] {
    at::Tensor storage, scales;
    {
      absl::MutexLock lock(&mu_);
      if (absl::Status status = MaterializeLocked(); !status.ok()) {
        return status;
      }
      if (tier != WeightTier::kHot ||
          options_.compute_copy != ComputeCopyPolicy::kCached ||
          !cached_copy_dropped_ || compute_.defined()) {
        return absl::OkStatus();
      }
      cached_copy_dropped_ = false;
      if (!storage_.defined() || StorageIsCompute()) {
        return EnsureComputeLocked();  // From the mapping, or no copy to make.
      }
      if (absl::Status status = LoadSourceScalesLocked(); !status.ok()) {
        return status;
      }
      storage = storage_;
      scales = scales_;
    }
    // The cached copy is decoded outside the lock: a forward that reads this
    // weight's storage meanwhile (a small product, rows of an embedding)
    // does not wait for it. The caller holds demotions off; a forward that
    // needed the copy and made it meanwhile wins.
    const absl::Time start = absl::Now();
    absl::StatusOr<at::Tensor> compute = DecodeFromStorage(storage, scales);
    if (!compute.ok()) return compute.status();
    absl::MutexLock lock(&mu_);
    if (!compute_.defined()) InstallComputeLocked(*std::move(compute), start);
    return absl::OkStatus();
  });
}

Footprint Weight::footprint() const {
  absl::MutexLock lock(&mu_);
  Footprint footprint;
  if (options_.residency == Residency::kMapped || !storage_.defined()) {
    footprint.AddMapped(static_cast<int64_t>(entry_.size_bytes));
  }
  if (storage_.defined()) {
    footprint.AddResident(
        StorageFormatName(),
        storage_.nbytes() + (scales_.defined() ? scales_.nbytes() : 0));
  } else if (scales_.defined()) {  // A pre-quantized mapped weight's scales.
    footprint.AddResident("f32", scales_.nbytes());
  }
  if (compute_.defined() && !compute_.is_same(storage_)) {
    if (options_.compute_copy == ComputeCopyPolicy::kCached) {
      footprint.AddCachedCompute(compute_.nbytes());
    } else {
      footprint.AddTransientCompute(compute_.nbytes());
    }
  }
  return footprint;
}

Footprint Weight::ConfiguredFootprint() const {
  Footprint footprint;
  const int64_t source_bytes = static_cast<int64_t>(entry_.size_bytes);
  bool has_compute_copy = true;
  if (options_.residency == Residency::kMapped) {
    footprint.AddMapped(source_bytes);
    // A pre-quantized mapped weight keeps its scales resident, as f32.
    if (prequantized()) {
      footprint.AddResident(
          "f32", scales_entry_->numel() * ElementSizeBytes(ElementType::kF32));
    }
  } else {
    // Create validated the format, and the checkpoint reader the shape
    // (its bytes lie inside the file): the size is defined.
    const int64_t storage_bytes =
        passthrough_ ? source_bytes
                     : *options_.storage.TotalBytes(entry_.shape);
    footprint.AddResident(StorageFormatName(), storage_bytes);
    has_compute_copy = !StorageIsCompute();
  }
  if (!has_compute_copy) return footprint;
  const int64_t compute_bytes =
      passthrough_ ? source_bytes
                   : entry_.numel() * ElementSizeBytes(options_.compute_dtype);
  if (options_.compute_copy == ComputeCopyPolicy::kCached) {
    footprint.AddCachedCompute(compute_bytes);
  } else {
    footprint.AddTransientCompute(compute_bytes);
  }
  return footprint;
}

std::string Weight::StorageFormatName() const {
  return passthrough_ ? absl::AsciiStrToLower(DTypeName(entry_.dtype))
                      : absl::AsciiStrToLower(options_.storage.ToString());
}

bool Weight::has_compute_copy() const {
  absl::MutexLock lock(&mu_);
  return compute_.defined();
}

int64_t Weight::compute_builds() const {
  absl::MutexLock lock(&mu_);
  return compute_builds_;
}

WeightActivity Weight::activity() const {
  absl::MutexLock lock(&mu_);
  WeightActivity activity = activity_;
  activity.storage_reads = storage_reads_.load(std::memory_order_relaxed);
  return activity;
}

}  // namespace castserve::casting
