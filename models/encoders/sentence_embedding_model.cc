#include "models/encoders/sentence_embedding_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "models/loading/hf_config.h"

namespace castserve::models {
namespace {

constexpr char kTypePrefix[] = "sentence_transformers.models.";

// The modules castserve runs, in the only order it runs them.
enum class ModuleKind { kTransformer, kPooling, kNormalize };

// The module types sentence-transformers 6 writes into modules.json.
struct ModuleType {
  const char* type;
  ModuleKind kind;
};
constexpr ModuleType kModuleTypes[] = {
    {"sentence_transformers.base.modules.transformer.Transformer",
     ModuleKind::kTransformer},
    {"sentence_transformers.sentence_transformer.modules.pooling.Pooling",
     ModuleKind::kPooling},
    {"sentence_transformers.base.modules.normalize.Normalize",
     ModuleKind::kNormalize},
};

struct ModuleEntry {
  ModuleKind kind;
  std::string path;
  std::string label;  // "<folder>/modules.json[i]", for messages.
};

absl::StatusOr<ModuleKind> KindOf(const std::string& type,
                                  const std::string& label) {
  for (const ModuleType& row : kModuleTypes) {
    if (type == row.type) return row.kind;
  }
  if (absl::StartsWith(type, kTypePrefix)) {
    const std::string name = type.substr(sizeof(kTypePrefix) - 1);
    if (name == "Transformer") return ModuleKind::kTransformer;
    if (name == "Pooling") return ModuleKind::kPooling;
    if (name == "Normalize") return ModuleKind::kNormalize;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      label, ": module type '", type,
      "' is not supported; castserve runs sentence_transformers.models."
      "Transformer, Pooling and Normalize (or sentence-transformers 6's "
      "base.modules.transformer.Transformer, sentence_transformer.modules."
      "pooling.Pooling, base.modules.normalize.Normalize)"));
}

// A module folder inside the model folder: relative, without "..".
absl::Status CheckModulePath(const std::string& path,
                             const std::string& label) {
  bool inside = !path.empty() && path.front() != '/' &&
                path.find('\0') == std::string::npos;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    inside = inside && part != "..";
  }
  if (inside) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      label, ": path '", path, "' is not a folder inside the model folder"));
}

absl::StatusOr<std::vector<ModuleEntry>> ReadModules(
    const std::string& modules_path, platform::FileSystem* file_system) {
  absl::StatusOr<std::vector<HfConfig>> items =
      HfConfig::LoadList(modules_path, file_system);
  if (!items.ok()) return items.status();
  std::vector<ModuleEntry> modules;
  for (const HfConfig& item : *items) {
    absl::StatusOr<std::string> type = item.GetString("type");
    absl::StatusOr<std::string> path = item.GetString("path", "");
    if (!type.ok()) return absl::InvalidArgumentError(type.status().message());
    if (!path.ok()) return path.status();
    absl::StatusOr<ModuleKind> kind = KindOf(*type, item.label());
    if (!kind.ok()) return kind.status();
    modules.push_back({*kind, *path, item.label()});
  }
  return modules;
}

// Transformer (the folder itself), Pooling, optionally Normalize.
absl::Status CheckPipeline(const std::vector<ModuleEntry>& modules,
                           const std::string& modules_path) {
  const bool shape_ok =
      (modules.size() == 2 || modules.size() == 3) &&
      modules[0].kind == ModuleKind::kTransformer &&
      modules[1].kind == ModuleKind::kPooling &&
      (modules.size() == 2 || modules[2].kind == ModuleKind::kNormalize);
  if (!shape_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(modules_path,
                     ": castserve runs the pipeline Transformer, Pooling, "
                     "optionally Normalize, in that order; this file lists ",
                     modules.size(), " modules in another arrangement"));
  }
  if (!modules[0].path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        modules[0].label, ": the Transformer's path is '", modules[0].path,
        "'; castserve serves the checkpoint of the folder itself (path \"\")"));
  }
  return CheckModulePath(modules[1].path, modules[1].label);
}

// sentence-transformers 6's keys of sentence_bert_config.json: the
// Transformer must give its token embeddings from last_hidden_state of a
// plain forward over text (another task or output is another pipeline).
absl::Status CheckTransformerTask(const HfConfig& config) {
  for (const auto& [key, expected] :
       {std::pair{"transformer_task", "feature-extraction"},
        std::pair{"module_output_name", "token_embeddings"}}) {
    absl::StatusOr<std::string> value = config.GetString(key, expected);
    if (!value.ok()) return value.status();
    if (*value != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.label(), ": ", key, " '", *value,
                       "' is not supported (only '", expected, "')"));
    }
  }
  if (!config.Has("modality_config")) return absl::OkStatus();
  absl::StatusOr<HfConfig> modalities = config.GetObject("modality_config");
  if (!modalities.ok()) return modalities.status();
  for (const std::string& modality : modalities->Keys()) {
    absl::StatusOr<HfConfig> entry = modalities->GetObject(modality);
    if (!entry.ok()) return entry.status();
    absl::StatusOr<std::string> method = entry->GetString("method", "");
    absl::StatusOr<std::string> output =
        entry->GetString("method_output_name", "");
    if (!method.ok()) return method.status();
    if (!output.ok()) return output.status();
    if (modality != "text" || *method != "forward" ||
        *output != "last_hidden_state") {
      return absl::InvalidArgumentError(absl::StrCat(
          config.label(), ": modality_config '", modality, "' runs ", *method,
          " for ", *output,
          "; castserve runs text through forward for last_hidden_state"));
    }
  }
  return absl::OkStatus();
}

// tokenizer_config.json's model_max_length, where sentence-transformers
// truncates when sentence_bert_config.json names no max_seq_length (6
// writes none); nullopt without the file, the key, or with a value out of
// bounds (the tokenizers' "unlimited" 1e30).
absl::StatusOr<std::optional<int64_t>> ReadTokenizerMaxLength(
    const std::string& folder, platform::FileSystem* file_system) {
  const std::string path = folder + "/tokenizer_config.json";
  if (!file_system->IsRegularFile(path)) return std::nullopt;
  absl::StatusOr<HfConfig> config = HfConfig::Load(path, file_system);
  if (!config.ok()) return config.status();
  if (!config->Has("model_max_length")) return std::nullopt;
  absl::StatusOr<int64_t> length = config->GetSize("model_max_length");
  if (!length.ok()) return std::nullopt;
  return *length;
}

// sentence_bert_config.json's max_seq_length, else the tokenizer's
// model_max_length (nullopt without either); do_lower_case must be false.
absl::StatusOr<std::optional<int64_t>> ReadMaxSeqLength(
    const std::string& folder, platform::FileSystem* file_system) {
  const std::string path = folder + "/sentence_bert_config.json";
  if (!file_system->IsRegularFile(path)) {
    return ReadTokenizerMaxLength(folder, file_system);
  }
  absl::StatusOr<HfConfig> config = HfConfig::Load(path, file_system);
  if (!config.ok()) return config.status();
  absl::StatusOr<bool> lower_case = config->GetBool("do_lower_case", false);
  if (!lower_case.ok()) return lower_case.status();
  if (*lower_case) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": do_lower_case true is not supported (castserve gives text to the "
        "tokenizer as sent)"));
  }
  if (absl::Status task = CheckTransformerTask(*config); !task.ok()) {
    return task;
  }
  if (!config->Has("max_seq_length")) {
    return ReadTokenizerMaxLength(folder, file_system);
  }
  absl::StatusOr<int64_t> length = config->GetSize("max_seq_length");
  if (!length.ok()) return length.status();
  return *length;
}

const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs,
                           const std::string& name) {
  for (const TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::optional<SentenceTransformerConfig>>
SentenceTransformerConfig::Load(const std::string& folder,
                                platform::FileSystem* file_system) {
  const std::string modules_path = folder + "/modules.json";
  if (!file_system->IsRegularFile(modules_path)) return std::nullopt;
  absl::StatusOr<std::vector<ModuleEntry>> modules =
      ReadModules(modules_path, file_system);
  if (!modules.ok()) return modules.status();
  if (absl::Status valid = CheckPipeline(*modules, modules_path); !valid.ok()) {
    return valid;
  }
  SentenceTransformerConfig config;
  absl::StatusOr<HfConfig> pooling = HfConfig::Load(
      absl::StrCat(folder, "/", (*modules)[1].path, "/config.json"),
      file_system);
  if (!pooling.ok()) return pooling.status();
  absl::StatusOr<PoolingConfig> pooling_config =
      PoolingConfig::FromHf(*pooling);
  if (!pooling_config.ok()) return pooling_config.status();
  config.pooling = *std::move(pooling_config);
  config.normalize = modules->size() == 3;
  absl::StatusOr<std::optional<int64_t>> max_seq_length =
      ReadMaxSeqLength(folder, file_system);
  if (!max_seq_length.ok()) return max_seq_length.status();
  config.max_seq_length = *max_seq_length;
  return config;
}

absl::StatusOr<std::unique_ptr<Model>> SentenceEmbeddingModel::Create(
    std::unique_ptr<Model> model, SentenceTransformerConfig config) {
  if (FindSpec(model->inputs(), "input_ids") == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sentence-transformers pipeline needs token inputs; ",
                     model->architecture(), " takes no input_ids"));
  }
  const TensorSpec* hidden = FindSpec(model->outputs(), "last_hidden_state");
  if (hidden == nullptr || hidden->shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sentence-transformers pipeline pools last_hidden_state [batch, "
        "seq, hidden]; ",
        model->architecture(), " gives none"));
  }
  if (hidden->shape[2] != config.pooling.word_embedding_dimension) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Pooling module's word_embedding_dimension is ",
                     config.pooling.word_embedding_dimension,
                     "; the model's hidden size is ", hidden->shape[2]));
  }
  return std::unique_ptr<Model>(
      new SentenceEmbeddingModel(std::move(model), std::move(config)));
}

SentenceEmbeddingModel::SentenceEmbeddingModel(std::unique_ptr<Model> model,
                                               SentenceTransformerConfig config)
    : model_(std::move(model)), config_(std::move(config)) {
  outputs_ = model_->outputs();
  outputs_.push_back({kSentenceEmbeddingOutput,
                      at::kFloat,
                      {-1, config_.pooling.output_dimension()}});
}

std::optional<int64_t> SentenceEmbeddingModel::max_sequence_length() const {
  std::optional<int64_t> limit = model_->max_sequence_length();
  if (!config_.max_seq_length) return limit;
  if (!limit) return config_.max_seq_length;
  return std::min(*limit, *config_.max_seq_length);
}

NamedTensors SentenceEmbeddingModel::ForwardImpl(
    ForwardContext& context, const NamedTensors& inputs) const {
  NamedTensors outputs = ForwardImplOf(*model_, context, inputs);
  auto mask = inputs.find("attention_mask");
  const at::Tensor attention_mask = mask != inputs.end()
                                        ? mask->second
                                        : at::ones_like(inputs.at("input_ids"));
  at::Tensor embedding =
      Pool(config_.pooling, outputs.at("last_hidden_state").to(at::kFloat),
           attention_mask);
  if (config_.normalize) embedding = L2NormalizeRows(embedding);
  outputs[kSentenceEmbeddingOutput] = std::move(embedding);
  return outputs;
}

}  // namespace castserve::models
