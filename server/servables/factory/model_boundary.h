// The repository boundary of one load: the paths a config names (the
// checkpoint folder, warmup data files) resolved inside the model repository,
// and every file the load opens checked on its real path
// (server/lifecycle/repository_boundary.h) before any is opened.
#ifndef CASTSERVE_SERVER_SERVABLES_FACTORY_MODEL_BOUNDARY_H_
#define CASTSERVE_SERVER_SERVABLES_FACTORY_MODEL_BOUNDARY_H_

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/model_config.pb.h"

namespace castserve {

// `relative_path` (`what`, for messages) joined to the model directory;
// INVALID_ARGUMENT when it is absolute, holds a NUL or leads outside the
// repository (the model directory's parent) through "..". Lexical.
absl::StatusOr<std::filesystem::path> ResolveInsideRepository(
    const std::string& model_directory, const std::string& relative_path,
    absl::string_view what);

// `model_directory` joined with `checkpoint_path` (the directory itself when
// empty). INVALID_ARGUMENT for an absolute path or one that leaves the
// repository (the model directory's parent) through "..". Lexical: symbolic
// links inside the repository are followed as the operator placed them.
absl::StatusOr<std::string> CheckpointFolder(
    const std::string& model_directory, const std::string& checkpoint_path);

// The files a load opens because of the config, checked against the
// repository on their real paths before any is opened: the model folder,
// the checkpoint folder, every file of it the loader may open, the warmup
// data files. OK without checking when `allow_symlinks_outside`.
absl::Status CheckInsideRepository(const std::string& model_directory,
                                   const std::string& checkpoint_folder,
                                   const inference::ModelConfig& config,
                                   bool allow_symlinks_outside);

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_FACTORY_MODEL_BOUNDARY_H_
