// HfConfig: a read-only view of a Hugging Face `config.json` (or of one of
// its nested objects, such as a SigLIP checkpoint's "vision_config" or a
// Llama 3 "rope_scaling"), with typed getters whose errors name the key and
// the file.
//
// A key whose value is JSON null counts as absent (transformers writes
// `"rope_scaling": null`). Integer getters accept integral literals only
// ("12", not "12.5"); number getters accept any number.
//
// Value type, cheap to copy (the parsed document is shared); immutable and
// safe to read concurrently.
#ifndef CASTSERVE_MODELS_LOADING_HF_CONFIG_H_
#define CASTSERVE_MODELS_LOADING_HF_CONFIG_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/file_system.h"

namespace castserve::models {

// The bounds castserve accepts for a size read from config.json, inclusive.
struct ConfigSizeLimit {
  const char* key;
  int64_t min;
  int64_t max;
};

// Every size castserve reads from a config.json, by key: wide enough for
// the published checkpoints of the architectures in models/, narrow enough
// that nothing absurd loads (a hidden_size of 10^9 that would advertise
// outputs of 10^9 columns) and that no product of sizes a model is built
// from (a weight's element count, a model's parameter count) comes near
// int64_t's range (static_asserts in hf_config.cc). models/README.md lists
// them and why.
inline constexpr ConfigSizeLimit kConfigSizeLimits[] = {
    {"vocab_size", 1, int64_t{1} << 24},
    {"hidden_size", 1, int64_t{1} << 16},
    {"intermediate_size", 1, int64_t{1} << 20},
    {"num_hidden_layers", 1, 1024},
    {"num_attention_heads", 1, 1024},
    {"num_key_value_heads", 1, 1024},
    {"head_dim", 1, 4096},
    {"max_position_embeddings", 1, int64_t{1} << 22},
    {"original_max_position_embeddings", 1, int64_t{1} << 22},
    {"sliding_window", 1, int64_t{1} << 22},
    {"type_vocab_size", 1, 1024},
    // ModernBERT's local attention: the band's full width, and how often a
    // global layer comes.
    {"local_attention", 1, int64_t{1} << 22},
    {"global_attn_every_n_layers", 1, 1024},
    // NomicBERT's config as the hub's checkpoints spell it (GPT-2's names
    // for hidden_size, num_hidden_layers, num_attention_heads,
    // intermediate_size, max_position_embeddings).
    {"n_embd", 1, int64_t{1} << 16},
    {"n_layer", 1, 1024},
    {"n_head", 1, 1024},
    {"n_inner", 1, int64_t{1} << 20},
    {"n_positions", 1, int64_t{1} << 22},
    // A sequence classifier's labels (id2label's size when it is given).
    {"num_labels", 1, int64_t{1} << 16},
    {"num_channels", 1, 16},
    {"image_size", 1, 4096},
    {"patch_size", 1, 4096},
    // A CLIP model's projection and a SigLIP text head's output width.
    {"projection_dim", 1, int64_t{1} << 16},
    {"projection_size", 1, int64_t{1} << 16},
    // sentence-transformers' 1_Pooling/config.json and
    // sentence_bert_config.json.
    {"word_embedding_dimension", 1, int64_t{1} << 16},
    {"embedding_dimension", 1, int64_t{1} << 16},  // sentence-transformers 6
    // tokenizer_config.json's model_max_length, read as a sentence
    // pipeline's truncation length when it is within these bounds.
    {"model_max_length", 1, int64_t{1} << 22},
    {"max_seq_length", 1, int64_t{1} << 22},
};

// The largest config.json read (Hugging Face's are a few kilobytes).
inline constexpr uint64_t kMaxHfConfigBytes = uint64_t{16} << 20;

class HfConfig {
 public:
  // Reads `path` through `file_system` and parses it. NotFound if it does not
  // exist; FailedPrecondition naming the path and the reason if it cannot be
  // read or holds more than kMaxHfConfigBytes; InvalidArgument if it is not
  // a JSON object (platform/json_parser.h: strict, nesting at most 64).
  static absl::StatusOr<HfConfig> Load(
      const std::string& path,
      platform::FileSystem* file_system = platform::FileSystem::Default());
  // Parses `json`; `label` (a file name) prefixes error messages.
  static absl::StatusOr<HfConfig> Parse(absl::string_view json,
                                        absl::string_view label);
  // Reads `path`, a JSON list of objects (sentence-transformers'
  // modules.json), as one config per item, labelled "<path>[i]". Errors as
  // Load's; InvalidArgument if it is not a list of objects.
  static absl::StatusOr<std::vector<HfConfig>> LoadList(
      const std::string& path,
      platform::FileSystem* file_system = platform::FileSystem::Default());

  // "bert", "llama", ... or "" when the config has none.
  std::string model_type() const;
  // Where this view came from, e.g. "config.json" or
  // "config.json:vision_config": for error messages.
  const std::string& label() const { return label_; }

  // True when `key` is present and not null.
  bool Has(absl::string_view key) const;
  // The keys present and not null, sorted.
  std::vector<std::string> Keys() const;
  // True when `key` is present and is an empty object, list or string.
  bool IsEmpty(absl::string_view key) const;

  // Required values: NotFound if absent, InvalidArgument if of another type.
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetDouble(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  // A nested object as a config of its own.
  absl::StatusOr<HfConfig> GetObject(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringList(
      absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntList(absl::string_view key) const;
  // A list of numbers (LongRoPE's short_factor).
  absl::StatusOr<std::vector<double>> GetDoubleList(
      absl::string_view key) const;

  // A size: an integer within its kConfigSizeLimits bounds. NotFound if
  // absent; InvalidArgument naming the key, the value and the bounds if out
  // of them ("config.json: hidden_size is 1000000000, outside [1, 65536]");
  // Internal if `key` has no limit (a caller's bug).
  absl::StatusOr<int64_t> GetSize(absl::string_view key) const;
  // The same for an optional size; `default_value` (the caller's, not
  // checked) if absent.
  absl::StatusOr<int64_t> GetSize(absl::string_view key,
                                  int64_t default_value) const;

  // Optional values: `default_value` if absent, InvalidArgument if present
  // with another type.
  absl::StatusOr<int64_t> GetInt(absl::string_view key,
                                 int64_t default_value) const;
  absl::StatusOr<double> GetDouble(absl::string_view key,
                                   double default_value) const;
  absl::StatusOr<bool> GetBool(absl::string_view key, bool default_value) const;
  absl::StatusOr<std::string> GetString(absl::string_view key,
                                        absl::string_view default_value) const;

 private:
  HfConfig(std::shared_ptr<const nlohmann::json> object, std::string label);

  // The value of `key`, nullptr if absent or null.
  const nlohmann::json* Lookup(absl::string_view key) const;
  // NotFound naming the key.
  absl::Status Missing(absl::string_view key) const;
  // InvalidArgument: `key` is not a `expected`.
  absl::Status WrongType(absl::string_view key,
                         absl::string_view expected) const;

  // Points into a shared parsed document (aliasing shared_ptr).
  std::shared_ptr<const nlohmann::json> object_;
  std::string label_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LOADING_HF_CONFIG_H_
