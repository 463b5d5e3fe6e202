#ifndef CASTSERVE_CASTING_FORMATS_CHECKPOINT_H_
#define CASTSERVE_CASTING_FORMATS_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "casting/codec/codec.h"
#include "casting/codec/dtype_table.h"
#include "platform/mapped_file.h"

namespace castserve::casting {

// Element types (DType) and their names come from casting/codec/dtype_table.h.

// "F32", "BF16", ... as written in safetensors headers ("" for BYTES, which
// no checkpoint holds).
absl::string_view DTypeName(DType dtype);
// The inverse of DTypeName; InvalidArgument naming the string if unknown.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);
int DTypeBits(DType dtype);

// One tensor of a checkpoint: where its bytes are, never the bytes.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // Row-major, contiguous.
  int file_index = 0;          // Index into Checkpoint::file().
  uint64_t offset_bytes = 0;   // Absolute offset of the data in that file.
  uint64_t size_bytes = 0;

  int64_t numel() const;
};

struct CheckpointOptions {
  // PyTorch checkpoints share storage between views and tied weights, so
  // their entries may overlap; safetensors forbids it.
  bool allow_overlapping_tensors = false;
};

// An opened checkpoint: the mapped files and a validated tensor list. Made by
// the format readers (safetensors_reader.h, torch_zip_reader.h); opening
// reads headers only, no data page is touched.
//
// Validation done by Create (so every reader gets it): each entry's byte
// size equals numel * dtype bits / 8, lies inside its file, no two entries
// overlap (unless options allow it), names are unique.
//
// Alignment: a tensor's offset need not be a multiple of its element size
// (the safetensors format does not promise it). Consumers must read the bytes
// as bytes (memcpy or decode from unaligned loads), never by casting the
// pointer to `const float*` and the like.
//
// Thread safety: immutable after Create; all methods are safe to call
// concurrently. Spans stay valid as long as the Checkpoint lives.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Create(
      std::vector<std::unique_ptr<platform::MappedFile>> files,
      std::vector<TensorEntry> tensors,
      std::map<std::string, std::string> metadata,
      CheckpointOptions options = {});

  // In file order, then offset order within each file.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // nullptr if there is no tensor of that name.
  const TensorEntry* Find(absl::string_view name) const;

  int file_count() const { return static_cast<int>(files_.size()); }
  const platform::MappedFile& file(int index) const { return *files_[index]; }

  // Free-form string metadata (safetensors `__metadata__`, index `metadata`).
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

  // The entry's bytes inside the mapping, zero-copy. Reading them faults
  // pages in; if the file was truncated since Open, the read raises SIGBUS:
  // use CopyTo unless you guard that yourself.
  absl::Span<const uint8_t> Bytes(const TensorEntry& entry) const;

  // Copies the entry's bytes to `dst` (which must hold entry.size_bytes),
  // returning DATA_LOSS instead of crashing if the file shrank under it.
  absl::Status CopyTo(const TensorEntry& entry, absl::Span<uint8_t> dst) const;

  // Decodes the entry (plain `source_type` on disk) straight from the
  // mapping into `dst` (entry.numel() elements of `dst_type`), without a
  // staging copy; DATA_LOSS as CopyTo (dst is then partly written).
  absl::Status DecodeTo(const TensorEntry& entry, ElementType source_type,
                        ElementType dst_type, void* dst,
                        const CodecOptions& options) const;

  // Encodes the entry (plain `source_type` on disk, rows along dim 0) straight
  // from the mapping into `format` at `dst` and `dst_scales`, as Encode does
  // from memory; `format`'s rows must encode on their own (EncodeGuarded).
  // DATA_LOSS as CopyTo.
  absl::Status EncodeTo(const TensorEntry& entry, ElementType source_type,
                        StorageFormat format, void* dst, float* dst_scales,
                        const CodecOptions& options) const;

  // Drops the pages covering the entry from this process's resident set (the
  // page cache keeps them; a later read faults them back in). For weights
  // that will not read the mapping again: a resident or cached copy exists.
  // A hint: failure only leaves the pages resident.
  void ReleasePages(const TensorEntry& entry) const;

  // Copies dst.size() bytes of the entry, starting `offset` bytes into it:
  // OutOfRange past the entry's end, DATA_LOSS as CopyTo.
  absl::Status CopyRangeTo(const TensorEntry& entry, uint64_t offset,
                           absl::Span<uint8_t> dst) const;

 private:
  Checkpoint() = default;
  // Fills index_by_name_ and checks the invariants listed above.
  absl::Status IndexAndValidate(const CheckpointOptions& options);
  // DATA_LOSS naming the file and `entry`: a guarded read of it failed with
  // `message`.
  absl::Status DataLossIn(const TensorEntry& entry,
                          absl::string_view message) const;

  std::vector<std::unique_ptr<platform::MappedFile>> files_;
  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, size_t> index_by_name_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_FORMATS_CHECKPOINT_H_
