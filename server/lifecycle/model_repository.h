#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_REPOSITORY_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_REPOSITORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/file_system.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/repository_boundary.h"

namespace castserve {

// One model directory found in the repository, with its parsed configuration
// or the precise reason it cannot be served.
struct ModelEntry {
  std::string name;
  std::string directory;
  absl::StatusOr<inference::ModelConfig> config;
};

// A Triton-style model repository on disk: `<path>/<model>/config.pbtxt`,
// read through a platform::FileSystem (the real one unless a test gives
// another). Immutable after Open; Scan re-reads the disk each time.
// Thread-compatible.
class ModelRepository {
 public:
  // Fails with NotFound if `path` does not exist, FailedPrecondition if it is
  // not a directory, PermissionDenied if it cannot be listed. Model folders
  // and config.pbtxt files whose symlinks lead outside `path` are bad models
  // unless `allow_symlinks_outside` (RepositoryBoundary).
  // `file_system` is not owned and must outlive the repository.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Open(
      const std::string& path, bool allow_symlinks_outside = false,
      platform::FileSystem* file_system = platform::FileSystem::Default());

  // Every model directory, sorted by name. Hidden entries (".*") and plain
  // files are ignored. A bad model yields an entry with an error status; only
  // failing to list the repository itself fails the scan.
  absl::StatusOr<std::vector<ModelEntry>> Scan() const;

  // The parsed and checked config.pbtxt of model `name` (a plain name).
  absl::StatusOr<inference::ModelConfig> LoadConfig(
      const std::string& name) const;

  // Whether `name` (a plain name) is a directory of the repository now.
  bool Contains(const std::string& name) const;

  const std::string& path() const { return boundary_.root; }
  const RepositoryBoundary& boundary() const { return boundary_; }

 private:
  explicit ModelRepository(RepositoryBoundary boundary)
      : boundary_(std::move(boundary)) {}
  std::string DirectoryOf(const std::string& name) const;

  const RepositoryBoundary boundary_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_REPOSITORY_H_
