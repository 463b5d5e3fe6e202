#include "casting/formats/checkpoint.h"

#include <algorithm>
#include <array>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/formats/safe_copy.h"

namespace castserve::casting {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// numel * bits / 8, or an error naming the tensor if it is negative,
// overflows or is not a whole number of bytes.
absl::StatusOr<uint64_t> ExpectedBytes(const TensorEntry& entry,
                                       const std::string& path) {
  const int bits = DTypeBits(entry.dtype);
  uint64_t total_bits = static_cast<uint64_t>(bits);
  for (int64_t dim : entry.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", entry.name, "' has negative shape ",
                       ShapeString(entry.shape)));
    }
    const auto udim = static_cast<uint64_t>(dim);
    if (udim != 0 &&
        total_bits > std::numeric_limits<uint64_t>::max() / 8 / udim) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", entry.name, "' shape ",
                       ShapeString(entry.shape), " overflows 64 bits"));
    }
    total_bits *= udim;
  }
  if (total_bits % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor '", entry.name, "' of dtype ", DTypeName(entry.dtype),
        " and shape ", ShapeString(entry.shape), " is not a whole byte count"));
  }
  return total_bits / 8;
}

}  // namespace

absl::string_view DTypeName(DType dtype) {
  return RowOf(dtype).checkpoint_name;
}

int DTypeBits(DType dtype) { return RowOf(dtype).bits; }

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  absl::StatusOr<const DtypeRow*> row = FindByCheckpointName(name);
  if (!row.ok()) return row.status();
  return (*row)->dtype;
}

int64_t TensorEntry::numel() const {
  int64_t numel = 1;
  for (int64_t dim : shape) numel *= dim;
  return numel;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Create(
    std::vector<std::unique_ptr<platform::MappedFile>> files,
    std::vector<TensorEntry> tensors,
    std::map<std::string, std::string> metadata, CheckpointOptions options) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->files_ = std::move(files);
  checkpoint->tensors_ = std::move(tensors);
  checkpoint->metadata_ = std::move(metadata);
  std::sort(checkpoint->tensors_.begin(), checkpoint->tensors_.end(),
            [](const TensorEntry& a, const TensorEntry& b) {
              return std::tie(a.file_index, a.offset_bytes, a.size_bytes) <
                     std::tie(b.file_index, b.offset_bytes, b.size_bytes);
            });
  if (absl::Status status = checkpoint->IndexAndValidate(options);
      !status.ok()) {
    return status;
  }
  return checkpoint;
}

absl::Status Checkpoint::IndexAndValidate(const CheckpointOptions& options) {
  auto& by_name = index_by_name_;
  const TensorEntry* previous = nullptr;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorEntry& entry = tensors_[i];
    if (entry.file_index < 0 || entry.file_index >= file_count()) {
      return absl::InternalError(absl::StrCat(
          "tensor '", entry.name, "' names file ", entry.file_index));
    }
    const platform::MappedFile& mapped = file(entry.file_index);
    auto [it, inserted] = by_name.emplace(entry.name, i);
    if (!inserted) {
      const TensorEntry& first = tensors_[it->second];
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor name '", entry.name, "' in ",
                       file(first.file_index).path(), " and ", mapped.path()));
    }
    absl::StatusOr<uint64_t> expected = ExpectedBytes(entry, mapped.path());
    if (!expected.ok()) return expected.status();
    if (*expected != entry.size_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(mapped.path(), ": tensor '", entry.name, "' of dtype ",
                       DTypeName(entry.dtype), " and shape ",
                       ShapeString(entry.shape), " needs ", *expected,
                       " bytes but its data range holds ", entry.size_bytes));
    }
    if (entry.offset_bytes > mapped.size_bytes() ||
        entry.size_bytes > mapped.size_bytes() - entry.offset_bytes) {
      return absl::OutOfRangeError(absl::StrCat(
          mapped.path(), ": tensor '", entry.name, "' bytes [",
          entry.offset_bytes, ", ", entry.offset_bytes + entry.size_bytes,
          ") lie beyond the end of the file (", mapped.size_bytes(),
          " bytes)"));
    }
    if (entry.size_bytes == 0 || options.allow_overlapping_tensors) continue;
    if (previous != nullptr && previous->file_index == entry.file_index &&
        previous->offset_bytes + previous->size_bytes > entry.offset_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(mapped.path(), ": tensors '", previous->name, "' and '",
                       entry.name, "' overlap at byte ", entry.offset_bytes));
    }
    previous = &entry;
  }
  return absl::OkStatus();
}

const TensorEntry* Checkpoint::Find(absl::string_view name) const {
  auto it = index_by_name_.find(std::string(name));
  return it == index_by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::Span<const uint8_t> Checkpoint::Bytes(const TensorEntry& entry) const {
  const uint8_t* base = file(entry.file_index).data();
  if (base == nullptr) return {};
  return absl::MakeConstSpan(base + entry.offset_bytes, entry.size_bytes);
}

absl::Status Checkpoint::DataLossIn(const TensorEntry& entry,
                                    absl::string_view message) const {
  return absl::DataLossError(absl::StrCat(
      file(entry.file_index).path(), ": tensor '", entry.name, "': ", message));
}

absl::Status Checkpoint::CopyTo(const TensorEntry& entry,
                                absl::Span<uint8_t> dst) const {
  if (dst.size() < entry.size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer of ", dst.size(), " bytes is too small for tensor '",
        entry.name, "' (", entry.size_bytes, " bytes)"));
  }
  return CopyRangeTo(entry, 0, dst.subspan(0, entry.size_bytes));
}

absl::Status Checkpoint::DecodeTo(const TensorEntry& entry,
                                  ElementType source_type, ElementType dst_type,
                                  void* dst,
                                  const CodecOptions& options) const {
  absl::Status status =
      DecodeGuarded(source_type, Bytes(entry).data(), entry.numel(), dst_type,
                    dst, ReadFromMapping, options);
  if (absl::IsDataLoss(status)) {
    return DataLossIn(entry, status.message());
  }
  return status;
}

absl::Status Checkpoint::EncodeTo(const TensorEntry& entry,
                                  ElementType source_type, StorageFormat format,
                                  void* dst, float* dst_scales,
                                  const CodecOptions& options) const {
  const int64_t num_rows = entry.shape.empty() ? 1 : entry.shape[0];
  absl::Status status =
      EncodeGuarded(source_type, Bytes(entry).data(), entry.numel(), num_rows,
                    format, dst, dst_scales, ReadFromMapping, options);
  if (absl::IsDataLoss(status)) {
    return DataLossIn(entry, status.message());
  }
  return status;
}

void Checkpoint::ReleasePages(const TensorEntry& entry) const {
  (void)file(entry.file_index)
      .AdviseDontNeed(entry.offset_bytes, entry.size_bytes);
}

absl::Status Checkpoint::CopyRangeTo(const TensorEntry& entry, uint64_t offset,
                                     absl::Span<uint8_t> dst) const {
  if (offset > entry.size_bytes || dst.size() > entry.size_bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "bytes [", offset, ", ", offset + dst.size(), ") are outside tensor '",
        entry.name, "' (", entry.size_bytes, " bytes)"));
  }
  absl::Span<const uint8_t> src = Bytes(entry).subspan(offset, dst.size());
  absl::Status status = CopyFromMapping(dst.data(), src.data(), src.size());
  if (!status.ok()) {
    return DataLossIn(entry, status.message());
  }
  return absl::OkStatus();
}

}  // namespace castserve::casting
