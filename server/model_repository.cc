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
    const std::string& path) {
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
  return std::unique_ptr<ModelRepository>(new ModelRepository(path));
}

absl::StatusOr<std::vector<ModelEntry>> ModelRepository::Scan() const {
  std::error_code error;
  fs::directory_iterator it(path_, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot list model repository ",
                                               path_, ": ", error.message()));
  }
  std::vector<ModelEntry> models;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_directory(error)) continue;
    const std::string directory = entry.path().string();
    models.push_back({name, directory, LoadModelConfig(directory, name)});
  }
  std::sort(
      models.begin(), models.end(),
      [](const ModelEntry& a, const ModelEntry& b) { return a.name < b.name; });
  return models;
}

}  // namespace castserve
