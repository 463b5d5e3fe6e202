#include "server/lifecycle/model_config_loader.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "server/lifecycle/tier_policy.h"

namespace castserve {
namespace {

using inference::ModelConfig;

// Collects text-format parse errors as "source:line:column: message".
class TextFormatErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit TextFormatErrors(absl::string_view source) : source_(source) {}

  void AddError(int line, int column, const std::string& message) override {
    // The parser counts from zero.
    errors_.push_back(
        absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {}

  std::string Joined() const { return absl::StrJoin(errors_, "; "); }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

absl::Status Invalid(absl::string_view model, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", model, "': ", what));
}

absl::Status ValidateCasting(const ModelConfig& config) {
  if (!config.weights().has_casting()) return absl::OkStatus();
  const inference::LayerwiseCasting& casting = config.weights().casting();
  if (casting.storage_dtype() == inference::STORAGE_DTYPE_UNSPECIFIED) {
    return Invalid(config.name(),
                   "weights.casting.storage_dtype must be set when casting is "
                   "configured");
  }
  const bool fp8 =
      casting.storage_dtype() == inference::STORAGE_DTYPE_F8_E4M3FN ||
      casting.storage_dtype() == inference::STORAGE_DTYPE_F8_E5M2;
  if (!fp8 && casting.scaling() != inference::SCALING_NONE) {
    return Invalid(
        config.name(),
        "weights.casting.scaling applies only to fp8 storage dtypes");
  }
  return absl::OkStatus();
}

// One `generation` field within [minimum, limit] (0 allowed for a field
// with a default).
absl::Status CheckGenerationField(const ModelConfig& config,
                                  absl::string_view field, int64_t value,
                                  int64_t minimum, int64_t limit) {
  if (value >= minimum && value <= limit) return absl::OkStatus();
  return Invalid(config.name(),
                 absl::StrCat("generation.", field, " must be in ", minimum,
                              "..", limit, ", got ", value));
}

absl::Status ValidateGeneration(const ModelConfig& config) {
  if (!config.has_generation()) return absl::OkStatus();
  const inference::GenerationConfig& generation = config.generation();
  // Whether the architecture generates is its registration's to say
  // (models::GenerativeArchitectures); the load checks it.
  if (config.max_batch_size() != 0 || config.has_dynamic_batching()) {
    return Invalid(config.name(),
                   "generation batches sequences itself (max_sequences): "
                   "max_batch_size must be 0 and dynamic_batching absent");
  }
  if (config.model_warmup_size() > 0) {
    return Invalid(config.name(),
                   "model_warmup is not supported with generation");
  }
  if (generation.kv_cache_bytes() <= 0) {
    return Invalid(config.name(),
                   absl::StrCat("generation.kv_cache_bytes must be > 0 (the "
                                "KV-cache pool), got ",
                                generation.kv_cache_bytes()));
  }
  if (generation.kv_cache_bytes() > kMaxKvCacheBytes) {
    return Invalid(config.name(),
                   absl::StrCat("generation.kv_cache_bytes must be at most ",
                                kMaxKvCacheBytes, " (1 TiB), got ",
                                generation.kv_cache_bytes()));
  }
  absl::Status valid =
      CheckGenerationField(config, "kv_block_tokens",
                           generation.kv_block_tokens(), 0, kMaxKvBlockTokens);
  if (valid.ok()) {
    valid =
        CheckGenerationField(config, "max_sequences",
                             generation.max_sequences(), 0, kMaxSequencesLimit);
  }
  if (valid.ok()) {
    valid = CheckGenerationField(config, "max_waiting",
                                 generation.max_waiting(), 0, kMaxWaitingLimit);
  }
  if (valid.ok()) {
    valid = CheckGenerationField(config, "default_max_tokens",
                                 generation.default_max_tokens(), 0,
                                 kMaxGenerationTokens);
  }
  return valid;
}

}  // namespace

inference::GenerationConfig WithGenerationDefaults(
    inference::GenerationConfig generation) {
  if (generation.kv_block_tokens() == 0) {
    generation.set_kv_block_tokens(kDefaultKvBlockTokens);
  }
  if (generation.max_sequences() == 0) {
    generation.set_max_sequences(kDefaultMaxSequences);
  }
  if (generation.max_waiting() == 0) {
    generation.set_max_waiting(kDefaultMaxWaiting);
  }
  if (generation.default_max_tokens() == 0) {
    generation.set_default_max_tokens(kDefaultMaxTokens);
  }
  return generation;
}

absl::Status ValidateModelConfig(const ModelConfig& config) {
  if (config.max_batch_size() < 0) {
    return Invalid(config.name(),
                   absl::StrCat("max_batch_size must be >= 0, got ",
                                config.max_batch_size()));
  }
  for (const auto& group : config.instance_group()) {
    if (group.count() < 0) {
      return Invalid(config.name(),
                     absl::StrCat("instance_group.count must be >= 0, got ",
                                  group.count()));
    }
  }
  if (config.has_dynamic_batching() && config.max_batch_size() == 0) {
    return Invalid(config.name(), "dynamic_batching needs max_batch_size > 0");
  }
  for (int size : config.dynamic_batching().preferred_batch_size()) {
    if (size <= 0 || size > config.max_batch_size()) {
      return Invalid(config.name(),
                     absl::StrCat("dynamic_batching.preferred_batch_size ",
                                  size, " is outside 1..max_batch_size (",
                                  config.max_batch_size(), ")"));
    }
  }
  if (absl::Status valid = ValidateMemoryTiers(config); !valid.ok()) {
    return valid;
  }
  absl::Status valid = ValidateCasting(config);
  return valid.ok() ? ValidateGeneration(config) : valid;
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view text,
                                             absl::string_view model_name,
                                             absl::string_view source_name) {
  ModelConfig config;
  TextFormatErrors errors(source_name);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_name, "': ", errors.Joined()));
  }
  if (config.name().empty()) {
    config.set_name(std::string(model_name));
  } else if (config.name() != model_name) {
    return Invalid(model_name,
                   absl::StrCat("config name '", config.name(),
                                "' does not match the directory name"));
  }
  if (absl::Status status = ValidateModelConfig(config); !status.ok()) {
    return status;
  }
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir,
                                            absl::string_view model_name,
                                            platform::FileSystem* file_system) {
  const std::string path = absl::StrCat(model_dir, "/", kModelConfigFileName);
  absl::StatusOr<std::string> text =
      file_system->ReadFile(path, kMaxModelConfigBytes);
  if (!text.ok()) {
    absl::StatusCode code = text.status().code();
    if (code == absl::StatusCode::kOutOfRange) {
      code = absl::StatusCode::kInvalidArgument;
    } else if (code != absl::StatusCode::kNotFound &&
               code != absl::StatusCode::kPermissionDenied) {
      code = absl::StatusCode::kInternal;
    }
    return absl::Status(code, absl::StrCat("model '", model_name,
                                           "': ", text.status().message()));
  }
  return ParseModelConfig(*text, model_name, path);
}

}  // namespace castserve
