#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_CONFIG_LOADER_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_CONFIG_LOADER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/file_system.h"
#include "proto/model_config.pb.h"

namespace castserve {

// The file name of a model's configuration inside its directory.
inline constexpr char kModelConfigFileName[] = "config.pbtxt";
// The largest config.pbtxt read.
inline constexpr uint64_t kMaxModelConfigBytes = uint64_t{16} << 20;

// Parses `text` (protobuf text format of inference.ModelConfig) and checks it.
// `model_name` is the model's directory name: an empty `name` is set to it, a
// different one is an error. Errors are InvalidArgument and name the
// source, line and column ("config.pbtxt:3:7: ...") or the offending field.
absl::StatusOr<inference::ModelConfig> ParseModelConfig(
    absl::string_view text, absl::string_view model_name,
    absl::string_view source_name = kModelConfigFileName);

// Reads `<model_dir>/config.pbtxt` through `file_system` and parses it.
// NotFound if the file is missing, PermissionDenied/Internal if unreadable,
// InvalidArgument if it holds more than kMaxModelConfigBytes; the message
// names the model, the path and the reason.
absl::StatusOr<inference::ModelConfig> LoadModelConfig(
    const std::string& model_dir, absl::string_view model_name,
    platform::FileSystem* file_system = platform::FileSystem::Default());

// Semantic checks that text format cannot express (ranges, combinations).
absl::Status ValidateModelConfig(const inference::ModelConfig& config);

// The `generation` block's defaults and limits (model_config.proto).
inline constexpr int64_t kDefaultKvBlockTokens = 16;
inline constexpr int64_t kDefaultMaxSequences = 8;
inline constexpr int64_t kDefaultMaxWaiting = 64;
inline constexpr int64_t kDefaultMaxTokens = 16;
inline constexpr int64_t kMaxKvBlockTokens = 4096;
inline constexpr int64_t kMaxSequencesLimit = 1024;
inline constexpr int64_t kMaxWaitingLimit = 65536;
// The largest KV-cache pool a config may ask for (1 TiB): far above any
// machine's memory, and low enough that a model's projected footprint (its
// checkpoint plus the pool) cannot overflow.
inline constexpr int64_t kMaxKvCacheBytes = int64_t{1} << 40;
// The most new tokens of one request (models::kMaxNewTokens).
inline constexpr int64_t kMaxGenerationTokens = int64_t{1} << 20;

// `generation` (validated) with every 0 replaced by its default.
inference::GenerationConfig WithGenerationDefaults(
    inference::GenerationConfig generation);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_CONFIG_LOADER_H_
