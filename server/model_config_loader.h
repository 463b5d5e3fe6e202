#ifndef CASTSERVE_SERVER_MODEL_CONFIG_LOADER_H_
#define CASTSERVE_SERVER_MODEL_CONFIG_LOADER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model_config.pb.h"

namespace castserve {

// The file name of a model's configuration inside its directory.
inline constexpr char kModelConfigFileName[] = "config.pbtxt";

// Parses `text` (protobuf text format of inference.ModelConfig) and checks it.
// `model_name` is the model's directory name: an empty `name` is set to it, a
// different one is an error. Errors are InvalidArgument and name the
// source, line and column ("config.pbtxt:3:7: ...") or the offending field.
absl::StatusOr<inference::ModelConfig> ParseModelConfig(
    absl::string_view text, absl::string_view model_name,
    absl::string_view source_name = kModelConfigFileName);

// Reads and parses `<model_dir>/config.pbtxt`. NotFound if the file is
// missing, PermissionDenied/Internal if unreadable.
absl::StatusOr<inference::ModelConfig> LoadModelConfig(
    const std::string& model_dir, absl::string_view model_name);

// Semantic checks that text format cannot express (ranges, combinations).
absl::Status ValidateModelConfig(const inference::ModelConfig& config);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_MODEL_CONFIG_LOADER_H_
