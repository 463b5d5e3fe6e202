// The models a repository offers: which names are models, where they live,
// their checked configurations, and the version castserve serves. Reads the
// disk on every call (models may be added while serving). Each load parses
// its config once, here. Thread-safe (the repository is immutable).
#ifndef CASTSERVE_SERVER_LIFECYCLE_MODEL_CATALOG_H_
#define CASTSERVE_SERVER_LIFECYCLE_MODEL_CATALOG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/model_lifecycle.h"
#include "server/lifecycle/model_repository.h"

namespace castserve {

// OK for "" and "1" (one version per model directory); NOT_FOUND naming
// `model` (may be empty) and `version` otherwise.
absl::Status CheckModelVersion(const std::string& model,
                               const std::string& version);

class ModelCatalog {
 public:
  // `repository` is not owned and outlives the catalog.
  explicit ModelCatalog(const ModelRepository* repository)
      : repository_(*repository) {}

  // Model names become directory names: INVALID_ARGUMENT for an empty
  // name, one longer than a file name may be, or one with a NUL, a path
  // separator, ".." or a leading '.'.
  static absl::Status ValidateName(const std::string& name);

  // Whether `name` (already valid) is a directory of the repository.
  bool Contains(const std::string& name) const;
  std::string DirectoryOf(const std::string& name) const;

  // ModelRepository::Scan: every model with its config or why it has none.
  absl::StatusOr<std::vector<ModelEntry>> Scan() const {
    return repository_.Scan();
  }

  // The config a load of `name` uses: `override` (RepositoryModelLoad's)
  // checked like a config.pbtxt (its name defaults to `name` and must be
  // it), or the model's config.pbtxt read and checked.
  absl::StatusOr<inference::ModelConfig> ConfigFor(
      const std::string& name,
      std::optional<inference::ModelConfig> override) const;

  // The status of a model that is not loaded, from its config: "not
  // loaded", the first_request hint, or why the config is unusable.
  static ModelStatus NotLoadedStatus(
      const std::string& name,
      const absl::StatusOr<inference::ModelConfig>& config);
  // Whether GetReady may load a model with this config.
  static bool LoadsOnFirstRequest(
      const absl::StatusOr<inference::ModelConfig>& config);

 private:
  const ModelRepository& repository_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_MODEL_CATALOG_H_
