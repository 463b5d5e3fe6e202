#include "server/servables/factory/model_boundary.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "platform/file_system.h"
#include "server/lifecycle/repository_boundary.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

// The model directory without a trailing separator, and the repository
// that holds it (its parent; "." for a bare name).
struct ModelPlace {
  fs::path model_dir;
  fs::path repository;
};
ModelPlace PlaceOf(const std::string& model_directory) {
  fs::path model_dir = fs::path(model_directory).lexically_normal();
  if (!model_dir.has_filename()) model_dir = model_dir.parent_path();
  fs::path repository = model_dir.parent_path();
  if (repository.empty()) repository = ".";
  return {model_dir, repository};
}

// The entries of a checkpoint folder the tokenizer and the
// sentence-transformers pipeline read: tokenizer.json, tokenizer.model,
// modules.json, sentence_bert_config.json and the module folders, named
// "<index>_<Module>" by sentence-transformers.
bool IsTextOrPipelineEntry(const std::string& name) {
  if (name == "tokenizer.json" || name == "tokenizer.model" ||
      name == "modules.json" || name == "sentence_bert_config.json") {
    return true;
  }
  const size_t underscore = name.find('_');
  return underscore != std::string::npos && underscore > 0 &&
         std::all_of(name.begin(), name.begin() + underscore,
                     [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

// A path from the model directory that stays inside the repository.
absl::StatusOr<fs::path> ResolveInsideRepository(
    const std::string& model_directory, const std::string& relative_path,
    absl::string_view what) {
  if (relative_path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " contains a NUL character"));
  }
  const fs::path relative(relative_path);
  if (relative.is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", relative_path,
                     "' is absolute; give it relative to the model directory"));
  }
  const ModelPlace place = PlaceOf(model_directory);
  const fs::path resolved = (place.model_dir / relative).lexically_normal();
  const fs::path inside = resolved.lexically_relative(place.repository);
  if (inside.empty() || *inside.begin() == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", relative_path, "' leads outside the model repository"));
  }
  return resolved;
}

absl::StatusOr<std::string> CheckpointFolder(
    const std::string& model_directory, const std::string& checkpoint_path) {
  if (checkpoint_path.empty()) return model_directory;
  absl::StatusOr<fs::path> folder = ResolveInsideRepository(
      model_directory, checkpoint_path, "checkpoint.path");
  if (!folder.ok()) return folder.status();
  return folder->string();
}

// The files a load opens because of the config, checked against the
// repository on their real paths before any is opened: the model folder,
// the checkpoint folder, every file of it the loader may open, the warmup
// data files.
absl::Status CheckInsideRepository(const std::string& model_directory,
                                   const std::string& checkpoint_folder,
                                   const inference::ModelConfig& config,
                                   bool allow_symlinks_outside) {
  if (allow_symlinks_outside) return absl::OkStatus();
  const ModelPlace place = PlaceOf(model_directory);
  const RepositoryBoundary boundary{place.repository.string()};
  absl::Status inside =
      boundary.Check(place.model_dir.string(), "model folder");
  if (inside.ok()) {
    inside = boundary.Check(checkpoint_folder, "checkpoint folder");
  }
  absl::StatusOr<std::vector<platform::FileSystem::DirectoryEntry>> entries =
      boundary.file_system->ListDirectory(checkpoint_folder);
  for (size_t i = 0; inside.ok() && entries.ok() && i < entries->size(); ++i) {
    const std::string& name = (*entries)[i].name;
    if (name == "config.json" || name == "pytorch_model.bin" ||
        absl::EndsWith(name, ".safetensors") ||
        absl::EndsWith(name, ".safetensors.index.json") ||
        IsTextOrPipelineEntry(name)) {
      inside = boundary.Check((fs::path(checkpoint_folder) / name).string(),
                              "checkpoint file");
    }
  }
  for (const inference::ModelWarmup& warmup : config.model_warmup()) {
    for (const auto& [name, input] : warmup.inputs()) {
      if (!inside.ok()) return inside;
      if (input.input_data_type_case() !=
          inference::ModelWarmup::Input::kInputDataFile) {
        continue;
      }
      absl::StatusOr<fs::path> path = ResolveInsideRepository(
          model_directory, input.input_data_file(), "warmup input_data_file");
      if (path.ok()) {
        inside = boundary.Check(path->string(), "warmup input_data_file");
      }
    }
  }
  return inside;
}

}  // namespace castserve
