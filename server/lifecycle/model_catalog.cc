#include "server/lifecycle/model_catalog.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/lifecycle/model_config_loader.h"
#include "server/log.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxModelNameBytes = 255;

}  // namespace

absl::Status CheckModelVersion(const std::string& model,
                               const std::string& version) {
  if (version.empty() || version == "1") return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      model.empty() ? "castserve" : "model " + Abbreviated(model),
      " has no version ", Abbreviated(version), " (only version 1)"));
}

absl::Status ModelCatalog::ValidateName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  if (name.size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", Abbreviated(name), "' is longer than ",
                     kMaxModelNameBytes, " bytes"));
  }
  if (name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("model name contains a NUL character");
  }
  if (name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' contains a path separator"));
  }
  if (name.find("..") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' contains '..'"));
  }
  if (name[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' starts with '.'"));
  }
  return absl::OkStatus();
}

bool ModelCatalog::Contains(const std::string& name) const {
  return repository_.Contains(name);
}

std::string ModelCatalog::DirectoryOf(const std::string& name) const {
  return (fs::path(repository_.path()) / name).string();
}

absl::StatusOr<inference::ModelConfig> ModelCatalog::ConfigFor(
    const std::string& name,
    std::optional<inference::ModelConfig> override) const {
  if (!override.has_value()) return repository_.LoadConfig(name);
  inference::ModelConfig config = *std::move(override);
  if (config.name().empty()) config.set_name(name);
  if (config.name() != name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "configuration names model '", config.name(), "', not '", name, "'"));
  }
  if (absl::Status valid = ValidateModelConfig(config); !valid.ok()) {
    return valid;
  }
  return config;
}

ModelStatus ModelCatalog::NotLoadedStatus(
    const std::string& name,
    const absl::StatusOr<inference::ModelConfig>& config) {
  ModelStatus status{name, "1", ModelState::kUnavailable, "not loaded"};
  if (!config.ok()) {
    status.reason = std::string(config.status().message());
  } else if (LoadsOnFirstRequest(config)) {
    status.reason = "not loaded; loads on its first request";
  }
  return status;
}

bool ModelCatalog::LoadsOnFirstRequest(
    const absl::StatusOr<inference::ModelConfig>& config) {
  return config.ok() &&
         config->load_policy() == inference::LOAD_POLICY_FIRST_REQUEST;
}

}  // namespace castserve
