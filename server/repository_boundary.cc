#include "server/repository_boundary.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace castserve {

namespace fs = std::filesystem;

absl::Status RepositoryBoundary::Check(const std::string& path,
                                       absl::string_view what) const {
  if (allow_symlinks_outside) return absl::OkStatus();
  std::error_code error;
  const fs::path real = fs::canonical(path, error);
  if (error) return absl::OkStatus();  // Missing: the opener says so.
  const fs::path real_root = fs::canonical(root, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model repository ", root, " cannot be resolved: ", error.message()));
  }
  const fs::path inside = real.lexically_relative(real_root);
  if (!inside.empty() && *inside.begin() != "..") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", path, " leads to ", real.string(),
      ", outside the model repository ", real_root.string(),
      " (--allow-symlinks-outside-repository allows symlinks that leave it)"));
}

}  // namespace castserve
