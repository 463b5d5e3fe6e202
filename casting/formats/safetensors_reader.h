#ifndef CASTSERVE_CASTING_FORMATS_SAFETENSORS_READER_H_
#define CASTSERVE_CASTING_FORMATS_SAFETENSORS_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/formats/checkpoint.h"
#include "platform/file_system.h"

namespace castserve::casting {

// Readers for the safetensors format: an 8-byte little-endian header length
// N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin,
// end]}, "__metadata__": {string: string}}), then the data, offsets relative
// to byte 8 + N.
//
// Opening reads the header with pread (never through the mapping) and maps
// the file; no data page is touched. All failures are absl::Status errors
// whose message names the file and, where there is one, the tensor; malformed
// input never crashes. The JSON is read by platform/json_parser.h: strict
// (RFC 8259, UTF-8), nesting depth at most 64, no duplicate keys. Tensors
// may come in any order and leave gaps between them; they must not overlap.

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100 * 1000 * 1000;

// A parsed header; offsets are relative to the start of the data region.
struct SafetensorsHeader {
  struct Tensor {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    uint64_t begin = 0;
    uint64_t end = 0;
  };
  std::vector<Tensor> tensors;  // Sorted by name.
  std::map<std::string, std::string> metadata;
};

// Parses the JSON header text. `file_label` prefixes error messages.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view json, absl::string_view file_label);

// Opens one `.safetensors` file, mapped through `file_system`.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensors(
    const std::string& path,
    platform::FileSystem* file_system = platform::FileSystem::Default());

// Opens a sharded set from its `model.safetensors.index.json`: every shard
// named in `weight_map` (plain file names in the index's folder) is opened;
// each listed tensor must be in its listed shard, each tensor of a shard must
// be listed for that shard, and no tensor may appear twice. Index `metadata`
// values are exposed as strings (numbers and booleans as JSON text), merged
// with the first shard's `__metadata__`. Shards take file indexes in the
// order of their file names. The index and the shards are read
// through `file_system`; a shard that cannot be opened is NotFound naming the
// index, the shard and the reason.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensorsIndex(
    const std::string& index_path,
    platform::FileSystem* file_system = platform::FileSystem::Default());

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_FORMATS_SAFETENSORS_READER_H_
