#include "casting/safetensors_reader.h"

#include <filesystem>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "casting/json_value.h"

namespace castserve::casting {
namespace {

constexpr uint64_t kLengthPrefixBytes = 8;
constexpr absl::string_view kMetadataKey = "__metadata__";

absl::Status HeaderError(absl::string_view file_label, absl::string_view tensor,
                         absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(file_label, ": tensor '", tensor, "': ", what));
}

absl::StatusOr<std::vector<int64_t>> ParseShape(const JsonValue& value,
                                                absl::string_view file_label,
                                                absl::string_view name) {
  if (value.kind != JsonValue::Kind::kArray) {
    return HeaderError(file_label, name, "\"shape\" must be an array");
  }
  std::vector<int64_t> shape;
  for (const JsonValue& item : value.items) {
    absl::StatusOr<uint64_t> dim = item.AsUint64();
    if (!dim.ok() || *dim > static_cast<uint64_t>(INT64_MAX)) {
      return HeaderError(file_label, name,
                         "\"shape\" entries must be non-negative integers");
    }
    shape.push_back(static_cast<int64_t>(*dim));
  }
  return shape;
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseOffsets(
    const JsonValue& value, absl::string_view file_label,
    absl::string_view name) {
  if (value.kind != JsonValue::Kind::kArray || value.items.size() != 2) {
    return HeaderError(file_label, name,
                       "\"data_offsets\" must be an array [begin, end]");
  }
  absl::StatusOr<uint64_t> begin = value.items[0].AsUint64();
  absl::StatusOr<uint64_t> end = value.items[1].AsUint64();
  if (!begin.ok() || !end.ok()) {
    return HeaderError(file_label, name,
                       "\"data_offsets\" must hold non-negative integers");
  }
  if (*end < *begin) {
    return HeaderError(file_label, name,
                       absl::StrCat("\"data_offsets\" end ", *end,
                                    " is before begin ", *begin));
  }
  return std::make_pair(*begin, *end);
}

absl::StatusOr<SafetensorsHeader::Tensor> ParseTensor(
    const std::string& name, const JsonValue& value,
    absl::string_view file_label) {
  if (value.kind != JsonValue::Kind::kObject) {
    return HeaderError(file_label, name, "entry must be an object");
  }
  SafetensorsHeader::Tensor tensor;
  tensor.name = name;
  const JsonValue* dtype = value.Member("dtype");
  const JsonValue* shape = value.Member("shape");
  const JsonValue* offsets = value.Member("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
    return HeaderError(file_label, name,
                       "needs \"dtype\", \"shape\" and \"data_offsets\"");
  }
  if (dtype->kind != JsonValue::Kind::kString) {
    return HeaderError(file_label, name, "\"dtype\" must be a string");
  }
  absl::StatusOr<DType> parsed_dtype = DTypeFromName(dtype->text);
  if (!parsed_dtype.ok()) {
    return HeaderError(file_label, name, parsed_dtype.status().message());
  }
  tensor.dtype = *parsed_dtype;
  absl::StatusOr<std::vector<int64_t>> parsed_shape =
      ParseShape(*shape, file_label, name);
  if (!parsed_shape.ok()) return parsed_shape.status();
  tensor.shape = std::move(*parsed_shape);
  auto parsed_offsets = ParseOffsets(*offsets, file_label, name);
  if (!parsed_offsets.ok()) return parsed_offsets.status();
  std::tie(tensor.begin, tensor.end) = *parsed_offsets;
  return tensor;
}

absl::StatusOr<std::map<std::string, std::string>> ParseStringMap(
    const JsonValue& value, absl::string_view file_label,
    absl::string_view what, bool allow_scalars) {
  if (value.kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": ", what, " must be an object"));
  }
  std::map<std::string, std::string> result;
  for (const auto& [key, item] : value.members) {
    const bool scalar = item.kind == JsonValue::Kind::kNumber ||
                        item.kind == JsonValue::Kind::kBool;
    if (item.kind == JsonValue::Kind::kString) {
      result[key] = item.text;
    } else if (allow_scalars && scalar) {
      result[key] = item.kind == JsonValue::Kind::kNumber
                        ? item.text
                        : (item.boolean ? "true" : "false");
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(file_label, ": ", what, " value of \"", key,
                       "\" must be a string, got ", JsonKindName(item.kind)));
    }
  }
  return result;
}

// Reads and parses the header of an opened file; the returned offsets are
// absolute file offsets.
absl::StatusOr<SafetensorsHeader> ReadHeader(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size_bytes() < kLengthPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated: ", file.size_bytes(),
                     " bytes, shorter than the 8-byte header length"));
  }
  uint8_t prefix[kLengthPrefixBytes];
  if (absl::Status s = file.ReadAt(0, kLengthPrefixBytes, prefix); !s.ok()) {
    return s;
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header of ", header_bytes, " bytes exceeds the limit of ",
        kMaxSafetensorsHeaderBytes));
  }
  if (header_bytes > file.size_bytes() - kLengthPrefixBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", header_bytes, " runs past the end of the ",
        file.size_bytes(), "-byte file"));
  }
  std::string json(header_bytes, '\0');
  if (absl::Status s =
          file.ReadAt(kLengthPrefixBytes, header_bytes, json.data());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(json, path);
  if (!header.ok()) return header.status();
  const uint64_t data_start = kLengthPrefixBytes + header_bytes;
  for (SafetensorsHeader::Tensor& tensor : header->tensors) {
    if (tensor.end > file.size_bytes() - data_start) {
      return absl::OutOfRangeError(absl::StrCat(
          path, ": tensor '", tensor.name, "': data_offsets [", tensor.begin,
          ", ", tensor.end, ") run past the end of the data (",
          file.size_bytes() - data_start, " bytes)"));
    }
    tensor.begin += data_start;
    tensor.end += data_start;
  }
  return header;
}

void AppendEntries(const SafetensorsHeader& header, int file_index,
                   std::vector<TensorEntry>& entries) {
  for (const SafetensorsHeader::Tensor& tensor : header.tensors) {
    TensorEntry entry;
    entry.name = tensor.name;
    entry.dtype = tensor.dtype;
    entry.shape = tensor.shape;
    entry.file_index = file_index;
    entry.offset_bytes = tensor.begin;
    entry.size_bytes = tensor.end - tensor.begin;
    entries.push_back(std::move(entry));
  }
}

absl::StatusOr<std::string> ReadIndexFile(const std::string& path,
                                          FileSystem& file_system) {
  absl::StatusOr<std::string> text =
      file_system.ReadFile(path, kMaxSafetensorsHeaderBytes);
  if (text.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": index larger than ", kMaxSafetensorsHeaderBytes, " bytes"));
  }
  return text;
}

struct ShardIndex {
  std::vector<std::string> shard_files;  // In order of first appearance.
  std::unordered_map<std::string, std::string> shard_of_tensor;
  std::map<std::string, std::string> metadata;
};

absl::StatusOr<ShardIndex> ParseIndex(const std::string& index_path,
                                      FileSystem& file_system) {
  absl::StatusOr<std::string> text = ReadIndexFile(index_path, file_system);
  if (!text.ok()) return text.status();
  absl::StatusOr<JsonValue> json = ParseJson(*text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": ", json.status().message()));
  }
  const JsonValue* weight_map = json->Member("weight_map");
  if (weight_map == nullptr || weight_map->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": needs a \"weight_map\" object"));
  }
  absl::StatusOr<std::map<std::string, std::string>> map =
      ParseStringMap(*weight_map, index_path, "weight_map", false);
  if (!map.ok()) return map.status();
  ShardIndex index;
  std::set<std::string> seen;
  for (const auto& [tensor, shard] : weight_map->members) {
    if (shard.text.empty() || shard.text == "." || shard.text == ".." ||
        shard.text.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": shard name '", shard.text, "' of tensor '", tensor,
          "' is not a file name in the index's folder"));
    }
    index.shard_of_tensor[tensor] = shard.text;
    if (seen.insert(shard.text).second) index.shard_files.push_back(shard.text);
  }
  if (const JsonValue* metadata = json->Member("metadata")) {
    auto parsed = ParseStringMap(*metadata, index_path, "metadata", true);
    if (!parsed.ok()) return parsed.status();
    index.metadata = std::move(*parsed);
  }
  return index;
}

absl::Status CheckShardAgainstIndex(const SafetensorsHeader& header,
                                    const std::string& shard,
                                    const std::string& shard_path,
                                    const ShardIndex& index) {
  for (const SafetensorsHeader::Tensor& tensor : header.tensors) {
    auto it = index.shard_of_tensor.find(tensor.name);
    if (it == index.shard_of_tensor.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(shard_path, ": tensor '", tensor.name,
                       "' is not listed in the index weight_map"));
    }
    if (it->second != shard) {
      return absl::InvalidArgumentError(absl::StrCat(
          shard_path, ": tensor '", tensor.name,
          "' is also in this shard but the index maps it to ", it->second));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view json, absl::string_view file_label) {
  absl::StatusOr<JsonValue> root = ParseJson(json);
  if (!root.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": header: ", root.status().message()));
  }
  if (root->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": header must be a JSON object"));
  }
  SafetensorsHeader header;
  for (const auto& [name, value] : root->members) {
    if (name == kMetadataKey) {
      auto metadata = ParseStringMap(value, file_label, kMetadataKey, false);
      if (!metadata.ok()) return metadata.status();
      header.metadata = std::move(*metadata);
      continue;
    }
    absl::StatusOr<SafetensorsHeader::Tensor> tensor =
        ParseTensor(name, value, file_label);
    if (!tensor.ok()) return tensor.status();
    header.tensors.push_back(std::move(*tensor));
  }
  return header;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensors(
    const std::string& path, FileSystem* file_system) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file =
      file_system->OpenMapped(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<SafetensorsHeader> header = ReadHeader(**file);
  if (!header.ok()) return header.status();
  std::vector<TensorEntry> entries;
  AppendEntries(*header, 0, entries);
  std::vector<std::unique_ptr<MappedFile>> files;
  files.push_back(std::move(*file));
  return Checkpoint::Create(std::move(files), std::move(entries),
                            std::move(header->metadata));
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensorsIndex(
    const std::string& index_path, FileSystem* file_system) {
  absl::StatusOr<ShardIndex> index = ParseIndex(index_path, *file_system);
  if (!index.ok()) return index.status();
  const std::filesystem::path folder =
      std::filesystem::path(index_path).parent_path();
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata = index->metadata;
  for (const std::string& shard : index->shard_files) {
    const std::string shard_path = (folder / shard).string();
    absl::StatusOr<std::unique_ptr<MappedFile>> file =
        file_system->OpenMapped(shard_path);
    if (!file.ok()) {
      return absl::NotFoundError(
          absl::StrCat(index_path, ": shard ", shard,
                       " cannot be opened: ", file.status().message()));
    }
    absl::StatusOr<SafetensorsHeader> header = ReadHeader(**file);
    if (!header.ok()) return header.status();
    absl::Status consistent =
        CheckShardAgainstIndex(*header, shard, shard_path, *index);
    if (!consistent.ok()) return consistent;
    if (files.empty())
      metadata.insert(header->metadata.begin(), header->metadata.end());
    AppendEntries(*header, static_cast<int>(files.size()), entries);
    files.push_back(std::move(*file));
  }
  // Every index entry must have been found in its shard.
  std::set<std::string> found;
  for (const TensorEntry& entry : entries) found.insert(entry.name);
  for (const auto& [tensor, shard] : index->shard_of_tensor) {
    if (found.count(tensor) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor '", tensor, "' is mapped to ",
                       shard, " but that shard does not contain it"));
    }
  }
  return Checkpoint::Create(std::move(files), std::move(entries),
                            std::move(metadata));
}

}  // namespace castserve::casting
