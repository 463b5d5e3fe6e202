#include "server/lifecycle/model_repository.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "platform/sanitized_text.h"
#include "server/lifecycle/model_config_loader.h"

namespace castserve {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Open(
    const std::string& path, bool allow_symlinks_outside,
    platform::FileSystem* file_system) {
  absl::StatusOr<platform::FileSystem::FileInfo> info = file_system->Stat(path);
  if (info.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(
        absl::StrCat("model repository ", path, " does not exist"));
  }
  if (!info.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "model repository cannot be read: ", info.status().message()));
  }
  if (info->type != platform::FileSystem::FileType::kDirectory) {
    return absl::FailedPreconditionError(
        absl::StrCat("model repository ", path, " is not a directory"));
  }
  if (!file_system->ListDirectory(path).ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "model repository ", path, " cannot be listed: permission denied"));
  }
  return std::unique_ptr<ModelRepository>(new ModelRepository(
      RepositoryBoundary{path, allow_symlinks_outside, file_system}));
}

absl::StatusOr<std::vector<ModelEntry>> ModelRepository::Scan() const {
  absl::StatusOr<std::vector<platform::FileSystem::DirectoryEntry>> entries =
      boundary_.file_system->ListDirectory(path());
  if (!entries.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot list model repository: ",
                                               entries.status().message()));
  }
  std::vector<ModelEntry> models;  // Sorted: the listing is.
  for (const platform::FileSystem::DirectoryEntry& entry : *entries) {
    if (entry.name.empty() || entry.name[0] == '.' ||
        entry.type != platform::FileSystem::FileType::kDirectory) {
      continue;
    }
    if (!platform::IsSanitized(entry.name)) {
      // Its name could not travel in a response (protobuf strings are
      // UTF-8) nor be asked for: listed under a quotable name, refused.
      const std::string shown = platform::SanitizeText(entry.name);
      models.push_back(
          {shown, DirectoryOf(entry.name),
           absl::InvalidArgumentError(absl::StrCat(
               "model folder name '", shown,
               "' is not valid UTF-8 or holds control characters; a model "
               "name must be printable UTF-8"))});
      continue;
    }
    models.push_back(
        {entry.name, DirectoryOf(entry.name), LoadConfig(entry.name)});
  }
  return models;
}

absl::StatusOr<inference::ModelConfig> ModelRepository::LoadConfig(
    const std::string& name) const {
  const std::string directory = DirectoryOf(name);
  absl::Status inside = boundary_.Check(directory, "model folder");
  if (inside.ok()) {
    inside = boundary_.Check(
        (fs::path(directory) / kModelConfigFileName).string(), "model config");
  }
  if (!inside.ok()) return inside;
  return LoadModelConfig(directory, name, boundary_.file_system);
}

bool ModelRepository::Contains(const std::string& name) const {
  return boundary_.file_system->IsDirectory(DirectoryOf(name));
}

std::string ModelRepository::DirectoryOf(const std::string& name) const {
  return (fs::path(path()) / name).string();
}

}  // namespace castserve
