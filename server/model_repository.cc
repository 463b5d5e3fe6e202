#include "server/model_repository.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "server/model_config_loader.h"

namespace castserve {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Open(
    const std::string& path, bool allow_symlinks_outside) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat("model repository ", path, " does not exist"));
  }
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat(
        "model repository ", path, " cannot be read: ", error.message()));
  }
  if (status.type() != fs::file_type::directory) {
    return absl::FailedPreconditionError(
        absl::StrCat("model repository ", path, " is not a directory"));
  }
  if (::access(path.c_str(), R_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "model repository ", path, " cannot be listed: permission denied"));
  }
  return std::unique_ptr<ModelRepository>(
      new ModelRepository(RepositoryBoundary{path, allow_symlinks_outside}));
}

absl::StatusOr<std::vector<ModelEntry>> ModelRepository::Scan() const {
  std::error_code error;
  fs::directory_iterator it(path(), error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot list model repository ",
                                               path(), ": ", error.message()));
  }
  std::vector<ModelEntry> models;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory(error)) continue;
    models.push_back({name, entry.path().string(), LoadConfig(name)});
  }
  std::sort(
      models.begin(), models.end(),
      [](const ModelEntry& a, const ModelEntry& b) { return a.name < b.name; });
  return models;
}

absl::StatusOr<inference::ModelConfig> ModelRepository::LoadConfig(
    const std::string& name) const {
  const std::string directory = (fs::path(path()) / name).string();
  absl::Status inside = boundary_.Check(directory, "model folder");
  if (inside.ok()) {
    inside = boundary_.Check(
        (fs::path(directory) / kModelConfigFileName).string(), "model config");
  }
  if (!inside.ok()) return inside;
  return LoadModelConfig(directory, name);
}

}  // namespace castserve
