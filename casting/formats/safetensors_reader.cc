#include "casting/formats/safetensors_reader.h"

#include <filesystem>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"

namespace castserve::casting {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;
constexpr absl::string_view kMetadataKey = "__metadata__";
// Headers and indexes nest three deep; the bound only has to be finite.
constexpr int kMaxJsonDepth = 64;

absl::StatusOr<Json> ParseBoundedJson(absl::string_view text) {
  platform::JsonLimits limits;
  limits.max_depth = kMaxJsonDepth;
  limits.max_bytes = kMaxSafetensorsHeaderBytes;
  return platform::ParseJson(text, limits);
}

// The value of a non-negative integer (JSON numbers without sign, fraction
// or exponent that fit 64 bits), nullptr for anything else.
const uint64_t* AsUint64(const Json& value) {
  return value.get_ptr<const Json::number_unsigned_t*>();
}

absl::Status HeaderError(absl::string_view file_label, absl::string_view tensor,
                         absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(file_label, ": tensor '", tensor, "': ", what));
}

absl::StatusOr<std::vector<int64_t>> ParseShape(const Json& value,
                                                absl::string_view file_label,
                                                absl::string_view name) {
  if (!value.is_array()) {
    return HeaderError(file_label, name, "\"shape\" must be an array");
  }
  std::vector<int64_t> shape;
  for (const Json& item : value) {
    const uint64_t* dim = AsUint64(item);
    if (dim == nullptr || *dim > static_cast<uint64_t>(INT64_MAX)) {
      return HeaderError(file_label, name,
                         "\"shape\" entries must be non-negative integers");
    }
    shape.push_back(static_cast<int64_t>(*dim));
  }
  return shape;
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseOffsets(
    const Json& value, absl::string_view file_label, absl::string_view name) {
  if (!value.is_array() || value.size() != 2) {
    return HeaderError(file_label, name,
                       "\"data_offsets\" must be an array [begin, end]");
  }
  const uint64_t* begin = AsUint64(value[0]);
  const uint64_t* end = AsUint64(value[1]);
  if (begin == nullptr || end == nullptr) {
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

// The member `key` of object `value`, nullptr if absent.
const Json* Member(const Json& value, const char* key) {
  auto it = value.find(key);
  return it == value.end() ? nullptr : &*it;
}

absl::StatusOr<SafetensorsHeader::Tensor> ParseTensor(
    const std::string& name, const Json& value, absl::string_view file_label) {
  if (!value.is_object()) {
    return HeaderError(file_label, name, "entry must be an object");
  }
  SafetensorsHeader::Tensor tensor;
  tensor.name = name;
  const Json* dtype = Member(value, "dtype");
  const Json* shape = Member(value, "shape");
  const Json* offsets = Member(value, "data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
    return HeaderError(file_label, name,
                       "needs \"dtype\", \"shape\" and \"data_offsets\"");
  }
  if (!dtype->is_string()) {
    return HeaderError(file_label, name, "\"dtype\" must be a string");
  }
  absl::StatusOr<DType> parsed_dtype =
      DTypeFromName(dtype->get_ref<const std::string&>());
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

// An object of strings; with `allow_scalars`, numbers and booleans too, as
// their JSON text.
absl::StatusOr<std::map<std::string, std::string>> ParseStringMap(
    const Json& value, absl::string_view file_label, absl::string_view what,
    bool allow_scalars) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": ", what, " must be an object"));
  }
  std::map<std::string, std::string> result;
  for (const auto& [key, item] : value.get_ref<const Json::object_t&>()) {
    if (item.is_string()) {
      result[key] = item.get_ref<const std::string&>();
    } else if (allow_scalars && (item.is_number() || item.is_boolean())) {
      result[key] = item.dump();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          file_label, ": ", what, " value of \"", key,
          "\" must be a string, got ", platform::JsonTypeName(item)));
    }
  }
  return result;
}

// Reads and parses the header of an opened file; the returned offsets are
// absolute file offsets.
absl::StatusOr<SafetensorsHeader> ReadHeader(const platform::MappedFile& file) {
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
                                          platform::FileSystem& file_system) {
  absl::StatusOr<std::string> text =
      file_system.ReadFile(path, kMaxSafetensorsHeaderBytes);
  if (text.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": index larger than ", kMaxSafetensorsHeaderBytes, " bytes"));
  }
  return text;
}

struct ShardIndex {
  // Sorted by file name ("-00001-of-00002" first): the files' indexes.
  std::set<std::string> shard_files;
  std::unordered_map<std::string, std::string> shard_of_tensor;
  std::map<std::string, std::string> metadata;
};

absl::StatusOr<ShardIndex> ParseIndex(const std::string& index_path,
                                      platform::FileSystem& file_system) {
  absl::StatusOr<std::string> text = ReadIndexFile(index_path, file_system);
  if (!text.ok()) return text.status();
  absl::StatusOr<Json> json = ParseBoundedJson(*text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": ", json.status().message()));
  }
  const Json* weight_map =
      json->is_object() ? Member(*json, "weight_map") : nullptr;
  if (weight_map == nullptr || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": needs a \"weight_map\" object"));
  }
  absl::StatusOr<std::map<std::string, std::string>> map =
      ParseStringMap(*weight_map, index_path, "weight_map", false);
  if (!map.ok()) return map.status();
  ShardIndex index;
  for (const auto& [tensor, shard] : *map) {
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": shard name '", shard, "' of tensor '",
                       tensor, "' is not a file name in the index's folder"));
    }
    index.shard_of_tensor[tensor] = shard;
    index.shard_files.insert(shard);
  }
  if (const Json* metadata = Member(*json, "metadata")) {
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
  absl::StatusOr<Json> root = ParseBoundedJson(json);
  if (!root.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": header: ", root.status().message()));
  }
  if (!root->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_label, ": header must be a JSON object"));
  }
  SafetensorsHeader header;
  for (const auto& [name, value] : root->get_ref<const Json::object_t&>()) {
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
    const std::string& path, platform::FileSystem* file_system) {
  absl::StatusOr<std::unique_ptr<platform::MappedFile>> file =
      file_system->OpenMapped(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<SafetensorsHeader> header = ReadHeader(**file);
  if (!header.ok()) return header.status();
  std::vector<TensorEntry> entries;
  AppendEntries(*header, 0, entries);
  std::vector<std::unique_ptr<platform::MappedFile>> files;
  files.push_back(std::move(*file));
  return Checkpoint::Create(std::move(files), std::move(entries),
                            std::move(header->metadata));
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensorsIndex(
    const std::string& index_path, platform::FileSystem* file_system) {
  absl::StatusOr<ShardIndex> index = ParseIndex(index_path, *file_system);
  if (!index.ok()) return index.status();
  const std::filesystem::path folder =
      std::filesystem::path(index_path).parent_path();
  std::vector<std::unique_ptr<platform::MappedFile>> files;
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata = index->metadata;
  for (const std::string& shard : index->shard_files) {
    const std::string shard_path = (folder / shard).string();
    absl::StatusOr<std::unique_ptr<platform::MappedFile>> file =
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
