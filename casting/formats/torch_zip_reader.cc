#include "casting/formats/torch_zip_reader.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/formats/state_dict_unpickler.h"

namespace castserve::casting {
namespace {

constexpr uint32_t kEndOfDirectorySignature = 0x06054b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectorySignature = 0x06064b50;
constexpr uint32_t kDirectoryEntrySignature = 0x02014b50;
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint64_t kEndOfDirectoryBytes = 22;
constexpr uint64_t kMaxCommentBytes = 0xFFFF;
constexpr uint64_t kMaxPickleBytes = 1ull << 30;

// One stored record of the archive.
struct ZipRecord {
  uint64_t data_offset = 0;
  uint64_t size_bytes = 0;
};

uint64_t LoadLittleEndian(const uint8_t* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// Bounds-checked little-endian reads from a buffer read out of the file.
class ByteView {
 public:
  ByteView(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  bool Has(uint64_t offset, uint64_t length) const {
    return offset <= bytes_.size() && length <= bytes_.size() - offset;
  }
  uint64_t U16(uint64_t offset) const { return Load(offset, 2); }
  uint64_t U32(uint64_t offset) const { return Load(offset, 4); }
  uint64_t U64(uint64_t offset) const { return Load(offset, 8); }
  std::string String(uint64_t offset, uint64_t length) const {
    if (!Has(offset, length)) return "";
    return std::string(reinterpret_cast<const char*>(&bytes_[offset]), length);
  }

 private:
  uint64_t Load(uint64_t offset, int bytes) const {
    return Has(offset, bytes) ? LoadLittleEndian(&bytes_[offset], bytes) : 0;
  }
  const std::vector<uint8_t>& bytes_;
};

// Reads the zip directory of a mapped file with pread; errors name the file.
class ZipDirectoryReader {
 public:
  explicit ZipDirectoryReader(const platform::MappedFile& file) : file_(file) {}

  absl::StatusOr<std::unordered_map<std::string, ZipRecord>> Read() {
    if (absl::Status s = FindDirectory(); !s.ok()) return s;
    std::vector<uint8_t> directory;
    if (absl::Status s =
            ReadBytes(directory_offset_, directory_bytes_, directory);
        !s.ok()) {
      return s;
    }
    return ParseEntries(directory);
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ": not a valid zip archive: ", what));
  }

  absl::Status ReadBytes(uint64_t offset, uint64_t length,
                         std::vector<uint8_t>& out) const {
    if (offset > file_.size_bytes() || length > file_.size_bytes() - offset) {
      return Error(absl::StrCat("structure at byte ", offset,
                                " runs past the end of the file"));
    }
    out.resize(length);
    return file_.ReadAt(offset, length, out.data());
  }

  absl::Status FindDirectory() {
    const uint64_t size = file_.size_bytes();
    if (size < kEndOfDirectoryBytes) return Error("file too short");
    const uint64_t tail_bytes =
        std::min<uint64_t>(size, kEndOfDirectoryBytes + kMaxCommentBytes);
    std::vector<uint8_t> tail;
    if (absl::Status s = ReadBytes(size - tail_bytes, tail_bytes, tail);
        !s.ok()) {
      return s;
    }
    ByteView view(tail);
    for (uint64_t at = tail_bytes - kEndOfDirectoryBytes + 1; at-- > 0;) {
      if (view.U32(at) != kEndOfDirectorySignature) continue;
      const uint64_t end_offset = size - tail_bytes + at;
      entry_count_ = view.U16(at + 10);
      directory_bytes_ = view.U32(at + 12);
      directory_offset_ = view.U32(at + 16);
      if (entry_count_ == 0xFFFF || directory_bytes_ == 0xFFFFFFFF ||
          directory_offset_ == 0xFFFFFFFF) {
        return ReadZip64End(end_offset);
      }
      return absl::OkStatus();
    }
    return Error("no end-of-central-directory record");
  }

  absl::Status ReadZip64End(uint64_t end_offset) {
    std::vector<uint8_t> locator;
    if (end_offset < 20) return Error("zip64 locator missing");
    if (absl::Status s = ReadBytes(end_offset - 20, 20, locator); !s.ok()) {
      return s;
    }
    if (ByteView(locator).U32(0) != kZip64LocatorSignature) {
      return Error("zip64 locator missing");
    }
    std::vector<uint8_t> record;
    if (absl::Status s = ReadBytes(ByteView(locator).U64(8), 56, record);
        !s.ok()) {
      return s;
    }
    ByteView view(record);
    if (view.U32(0) != kZip64EndOfDirectorySignature) {
      return Error("zip64 end-of-central-directory record missing");
    }
    entry_count_ = view.U64(32);
    directory_bytes_ = view.U64(40);
    directory_offset_ = view.U64(48);
    return absl::OkStatus();
  }

  // Applies the zip64 extended-information extra field to 0xFFFFFFFF fields.
  absl::Status ApplyZip64Extra(const ByteView& view, uint64_t extra_offset,
                               uint64_t extra_bytes, uint64_t& size,
                               uint64_t& compressed, uint64_t& local) const {
    uint64_t at = extra_offset;
    while (at + 4 <= extra_offset + extra_bytes && view.Has(at, 4)) {
      const uint64_t id = view.U16(at);
      const uint64_t length = view.U16(at + 2);
      if (id == 0x0001) {
        uint64_t field = at + 4;
        for (uint64_t* value : {&size, &compressed, &local}) {
          if (*value != 0xFFFFFFFF) continue;
          if (field + 8 > at + 4 + length || !view.Has(field, 8)) {
            return Error("short zip64 extra field");
          }
          *value = view.U64(field);
          field += 8;
        }
        return absl::OkStatus();
      }
      at += 4 + length;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> LocalDataOffset(uint64_t header_offset,
                                           const std::string& name) const {
    std::vector<uint8_t> header;
    if (absl::Status s = ReadBytes(header_offset, 30, header); !s.ok()) {
      return s;
    }
    ByteView view(header);
    if (view.U32(0) != kLocalHeaderSignature) {
      return Error(absl::StrCat("bad local header for record ", name));
    }
    return header_offset + 30 + view.U16(26) + view.U16(28);
  }

  absl::StatusOr<std::unordered_map<std::string, ZipRecord>> ParseEntries(
      const std::vector<uint8_t>& directory) const {
    std::unordered_map<std::string, ZipRecord> records;
    ByteView view(directory);
    uint64_t at = 0;
    for (uint64_t i = 0; i < entry_count_; ++i) {
      if (!view.Has(at, 46) || view.U32(at) != kDirectoryEntrySignature) {
        return Error(absl::StrCat("bad central directory entry ", i));
      }
      const uint64_t method = view.U16(at + 10);
      uint64_t compressed = view.U32(at + 20);
      uint64_t size = view.U32(at + 24);
      const uint64_t name_bytes = view.U16(at + 28);
      const uint64_t extra_bytes = view.U16(at + 30);
      const uint64_t comment_bytes = view.U16(at + 32);
      uint64_t local = view.U32(at + 42);
      if (!view.Has(at + 46, name_bytes + extra_bytes + comment_bytes)) {
        return Error(absl::StrCat("central directory entry ", i, " truncated"));
      }
      const std::string name = view.String(at + 46, name_bytes);
      absl::Status s = ApplyZip64Extra(view, at + 46 + name_bytes, extra_bytes,
                                       size, compressed, local);
      if (!s.ok()) return s;
      if (method != 0 || compressed != size) {
        return Error(absl::StrCat("record ", name, " is compressed (method ",
                                  method, "); torch.save stores records"));
      }
      absl::StatusOr<uint64_t> data_offset = LocalDataOffset(local, name);
      if (!data_offset.ok()) return data_offset.status();
      if (*data_offset > file_.size_bytes() ||
          size > file_.size_bytes() - *data_offset) {
        return Error(absl::StrCat("record ", name, " runs past the end"));
      }
      if (!records.emplace(name, ZipRecord{*data_offset, size}).second) {
        return Error(absl::StrCat("record ", name, " appears twice"));
      }
      at += 46 + name_bytes + extra_bytes + comment_bytes;
    }
    return records;
  }

  const platform::MappedFile& file_;
  uint64_t entry_count_ = 0;
  uint64_t directory_bytes_ = 0;
  uint64_t directory_offset_ = 0;
};

// The archive's folder name: the prefix of its `<prefix>/data.pkl` record.
absl::StatusOr<std::string> ArchivePrefix(
    const std::unordered_map<std::string, ZipRecord>& records,
    const std::string& path) {
  for (const auto& [name, record] : records) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl") {
      return name.substr(0, slash + 1);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": no <archive>/data.pkl record: not a torch.save zip checkpoint"));
}

struct Archive {
  const platform::MappedFile* file = nullptr;
  std::unordered_map<std::string, ZipRecord> records;
  std::string prefix;
};

absl::Status CheckContiguous(const PickledTensor& tensor,
                             const std::string& where) {
  int64_t expected = 1;
  for (size_t i = tensor.shape.size(); i-- > 0;) {
    if (tensor.shape[i] != 1 && tensor.stride[i] != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is not contiguous (size [",
                       absl::StrJoin(tensor.shape, ", "), "], stride [",
                       absl::StrJoin(tensor.stride, ", "),
                       "]); save it with .contiguous()"));
    }
    if (tensor.shape[i] < 0 ||
        (tensor.shape[i] > 0 && expected > INT64_MAX / tensor.shape[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has an invalid size"));
    }
    expected *= tensor.shape[i];
  }
  return absl::OkStatus();
}

// Locates the tensor's bytes inside its storage record.
absl::StatusOr<TensorEntry> MakeEntry(const Archive& archive,
                                      const PickledTensor& tensor) {
  const std::string where =
      absl::StrCat(archive.file->path(), ": tensor '", tensor.name, "'");
  if (absl::Status s = CheckContiguous(tensor, where); !s.ok()) return s;
  TensorEntry entry;
  entry.name = tensor.name;
  entry.dtype = tensor.dtype;
  entry.shape = tensor.shape;
  const uint64_t item_bytes = DTypeBits(tensor.dtype) / 8;
  const uint64_t numel = static_cast<uint64_t>(entry.numel());
  entry.size_bytes = numel * item_bytes;
  if (numel == 0) return entry;
  auto it = archive.records.find(archive.prefix + "data/" + tensor.storage_key);
  if (it == archive.records.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": storage record data/", tensor.storage_key, " is missing"));
  }
  const ZipRecord& record = it->second;
  const uint64_t storage_bytes =
      static_cast<uint64_t>(tensor.storage_numel) * item_bytes;
  if (tensor.storage_numel < 0 ||
      storage_bytes / item_bytes !=
          static_cast<uint64_t>(tensor.storage_numel) ||
      storage_bytes != record.size_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": storage data/", tensor.storage_key, " holds ",
        record.size_bytes, " bytes, the pickle says ", tensor.storage_numel,
        " elements of ", item_bytes, " bytes"));
  }
  const uint64_t begin =
      static_cast<uint64_t>(tensor.storage_offset) * item_bytes;
  if (tensor.storage_offset < 0 ||
      static_cast<uint64_t>(tensor.storage_offset) > tensor.storage_numel ||
      numel > static_cast<uint64_t>(tensor.storage_numel) -
                  static_cast<uint64_t>(tensor.storage_offset)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " (", numel, " elements at element offset ",
                     tensor.storage_offset, ") runs past its storage of ",
                     tensor.storage_numel, " elements"));
  }
  entry.offset_bytes = record.data_offset + begin;
  return entry;
}

absl::Status CheckByteOrder(const Archive& archive) {
  auto it = archive.records.find(archive.prefix + "byteorder");
  if (it == archive.records.end()) return absl::OkStatus();
  std::string order(std::min<uint64_t>(it->second.size_bytes, 16), '\0');
  absl::Status s =
      archive.file->ReadAt(it->second.data_offset, order.size(), order.data());
  if (!s.ok()) return s;
  if (order != "little") {
    return absl::InvalidArgumentError(absl::StrCat(
        archive.file->path(), ": byte order '", order, "' is not supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPickle(const Archive& archive) {
  const ZipRecord& record = archive.records.at(archive.prefix + "data.pkl");
  if (record.size_bytes > kMaxPickleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(archive.file->path(), ": data.pkl is too large"));
  }
  std::string pickle(record.size_bytes, '\0');
  absl::Status s =
      archive.file->ReadAt(record.data_offset, pickle.size(), pickle.data());
  if (!s.ok()) return s;
  return pickle;
}

absl::StatusOr<std::vector<TensorEntry>> UnpickleEntries(
    const Archive& archive, const std::string& pickle) {
  absl::StatusOr<std::vector<PickledTensor>> tensors =
      UnpickleStateDict(pickle);
  if (!tensors.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(archive.file->path(), ": ", tensors.status().message()));
  }
  std::vector<TensorEntry> entries;
  for (const PickledTensor& tensor : *tensors) {
    absl::StatusOr<TensorEntry> entry = MakeEntry(archive, tensor);
    if (!entry.ok()) return entry.status();
    entries.push_back(std::move(*entry));
  }
  return entries;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenTorchZip(
    const std::string& path, platform::FileSystem* file_system) {
  absl::StatusOr<std::unique_ptr<platform::MappedFile>> file =
      file_system->OpenMapped(path);
  if (!file.ok()) return file.status();
  Archive archive;
  archive.file = file->get();
  auto records = ZipDirectoryReader(**file).Read();
  if (!records.ok()) return records.status();
  archive.records = std::move(*records);
  absl::StatusOr<std::string> prefix = ArchivePrefix(archive.records, path);
  if (!prefix.ok()) return prefix.status();
  archive.prefix = std::move(*prefix);
  if (absl::Status s = CheckByteOrder(archive); !s.ok()) return s;
  absl::StatusOr<std::string> pickle = ReadPickle(archive);
  if (!pickle.ok()) return pickle.status();
  absl::StatusOr<std::vector<TensorEntry>> entries =
      UnpickleEntries(archive, *pickle);
  if (!entries.ok()) return entries.status();
  std::vector<std::unique_ptr<platform::MappedFile>> files;
  files.push_back(std::move(*file));
  CheckpointOptions options;
  options.allow_overlapping_tensors = true;
  return Checkpoint::Create(std::move(files), std::move(*entries), {}, options);
}

}  // namespace castserve::casting
