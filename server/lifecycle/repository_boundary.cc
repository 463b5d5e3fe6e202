#include "server/lifecycle/repository_boundary.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace castserve {

namespace fs = std::filesystem;

absl::Status RepositoryBoundary::Check(const std::string& path,
                                       absl::string_view what) const {
  if (allow_symlinks_outside) return absl::OkStatus();
  absl::StatusOr<std::string> real = file_system->RealPath(path);
  if (!real.ok()) return absl::OkStatus();  // Missing: the opener says so.
  absl::StatusOr<std::string> real_root = file_system->RealPath(root);
  if (!real_root.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model repository cannot be resolved: ", real_root.status().message()));
  }
  const fs::path inside = fs::path(*real).lexically_relative(*real_root);
  if (!inside.empty() && *inside.begin() != "..") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", path, " leads to ", *real, ", outside the model repository ",
      *real_root,
      " (--allow-symlinks-outside-repository allows symlinks that leave it)"));
}

}  // namespace castserve
