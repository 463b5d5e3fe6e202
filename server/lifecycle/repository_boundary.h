// The model repository as a boundary: files the daemon opens because of a
// config or a request (a model's folder and config.pbtxt, its checkpoint
// folder and files, warmup data files) must lie inside the repository,
// judged on their real paths, so that a symlink cannot lead a config to a
// file elsewhere on the machine. Operators who keep checkpoints elsewhere
// and link them in allow that with --allow-symlinks-outside-repository.
#ifndef CASTSERVE_SERVER_LIFECYCLE_REPOSITORY_BOUNDARY_H_
#define CASTSERVE_SERVER_LIFECYCLE_REPOSITORY_BOUNDARY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "platform/file_system.h"

namespace castserve {

struct RepositoryBoundary {
  // The repository folder, as given.
  std::string root;
  // Symlinks may lead outside `root`: every check passes.
  bool allow_symlinks_outside = false;
  // Where real paths are resolved; not owned.
  platform::FileSystem* file_system = platform::FileSystem::Default();

  // OK when `path` resolves (symlinks followed) to a place inside `root`'s
  // real path, or does not exist (its opener reports that). Otherwise
  // InvalidArgument naming `what`, the path, where it leads and the flag.
  absl::Status Check(const std::string& path, absl::string_view what) const;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_REPOSITORY_BOUNDARY_H_
