#include "models/loading/model_loader.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/torch_zip_reader.h"
#include "models/casting_hooks.h"
#include "models/encoders/sentence_embedding_model.h"
#include "models/loading/prequantized_weights.h"

namespace castserve::models {
namespace {

struct Registered {
  ArchitectureFactory factory;
  ArchitectureTraits traits;
};

struct Registry {
  absl::Mutex mu;
  std::map<std::string, Registered> architectures ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* const registry = new Registry();
  return *registry;
}

// A model with casting hooks attached to its tree: the hooks are declared
// after the model, so they are removed before the tree is destroyed.
class HookedModel final : public Model {
 public:
  HookedModel(std::unique_ptr<Model> model, CastingHooks::Options options)
      : model_(std::move(model)),
        hooks_(CastingHooks::Attach(model_->root(), options)) {}

  std::string architecture() const override { return model_->architecture(); }
  const std::vector<TensorSpec>& inputs() const override {
    return model_->inputs();
  }
  const std::vector<TensorSpec>& outputs() const override {
    return model_->outputs();
  }
  Module& root() override { return model_->root(); }
  casting::Device device() const override { return model_->device(); }
  PrefetchCounts prefetch_counts() const override {
    return hooks_->prefetch_counts();
  }
  std::optional<int64_t> max_sequence_length() const override {
    return model_->max_sequence_length();
  }
  const IncrementalDecoder* incremental_decoder() const override {
    return model_->incremental_decoder();
  }
  std::vector<std::string> output_labels() const override {
    return model_->output_labels();
  }

 protected:
  absl::Status ValidateInputs(const NamedTensors& inputs) const override {
    return ValidateInputsOf(*model_, inputs);
  }
  NamedTensors ForwardImpl(ForwardContext& context,
                           const NamedTensors& inputs) const override {
    return ForwardImplOf(*model_, context, inputs);
  }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<CastingHooks> hooks_;
};

}  // namespace

absl::Status RegisterArchitecture(std::string model_type,
                                  ArchitectureFactory factory,
                                  ArchitectureTraits traits) {
  if (model_type.empty()) {
    return absl::InvalidArgumentError("architecture name must not be empty");
  }
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  if (!registry.architectures
           .emplace(model_type, Registered{std::move(factory), traits})
           .second) {
    return absl::AlreadyExistsError(
        absl::StrCat("architecture '", model_type, "' is already registered"));
  }
  return absl::OkStatus();
}

ArchitectureRegistration::ArchitectureRegistration(std::string model_type,
                                                   ArchitectureFactory factory,
                                                   ArchitectureTraits traits) {
  absl::Status status =
      RegisterArchitecture(std::move(model_type), std::move(factory), traits);
  if (!status.ok()) {
    std::cerr << "castserve: " << status << std::endl;
    std::abort();
  }
}

std::vector<std::string> RegisteredArchitectures() {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  std::vector<std::string> names;
  for (const auto& [name, registered] : registry.architectures) {
    names.push_back(name);
  }
  return names;  // std::map keeps them sorted.
}

std::vector<std::string> GenerativeArchitectures() {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  std::vector<std::string> names;
  for (const auto& [name, registered] : registry.architectures) {
    if (registered.traits.generates) names.push_back(name);
  }
  return names;
}

absl::StatusOr<std::unique_ptr<casting::Checkpoint>> OpenHfCheckpoint(
    const std::string& folder, platform::FileSystem* file_system) {
  const std::string safetensors = folder + "/model.safetensors";
  if (file_system->IsRegularFile(safetensors)) {
    return casting::OpenSafetensors(safetensors, file_system);
  }
  const std::string index = folder + "/model.safetensors.index.json";
  if (file_system->IsRegularFile(index)) {
    return casting::OpenSafetensorsIndex(index, file_system);
  }
  const std::string torch_zip = folder + "/pytorch_model.bin";
  if (file_system->IsRegularFile(torch_zip)) {
    return casting::OpenTorchZip(torch_zip, file_system);
  }
  return absl::NotFoundError(
      absl::StrCat(folder,
                   " has no checkpoint: tried model.safetensors, "
                   "model.safetensors.index.json, pytorch_model.bin"));
}

namespace {

absl::StatusOr<ArchitectureFactory> FindArchitecture(
    absl::string_view model_type, absl::string_view config_label) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  auto it = registry.architectures.find(std::string(model_type));
  if (it != registry.architectures.end()) return it->second.factory;
  std::vector<std::string> names;
  for (const auto& [name, registered] : registry.architectures) {
    names.push_back(name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported architecture '", model_type, "' (model_type of ",
      config_label, "); supported: ",
      names.empty() ? "none linked in" : absl::StrJoin(names, ", ")));
}

// `model` with the folder's sentence-transformers pipeline after it, or as
// it is when the folder has none.
absl::StatusOr<std::unique_ptr<Model>> WithSentenceTransformerPipeline(
    const std::string& folder, std::unique_ptr<Model> model,
    platform::FileSystem* file_system) {
  absl::StatusOr<std::optional<SentenceTransformerConfig>> pipeline =
      SentenceTransformerConfig::Load(folder, file_system);
  if (!pipeline.ok()) return pipeline.status();
  if (!pipeline->has_value()) return model;
  absl::StatusOr<std::unique_ptr<Model>> wrapped =
      SentenceEmbeddingModel::Create(std::move(model), **std::move(pipeline));
  if (!wrapped.ok()) {
    return absl::Status(
        wrapped.status().code(),
        absl::StrCat(folder, "/modules.json: ", wrapped.status().message()));
  }
  return wrapped;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadHfModel(
    const std::string& folder, const WeightPolicyOptions& options,
    absl::string_view architecture_override,
    platform::FileSystem* file_system) {
  absl::StatusOr<HfConfig> config =
      HfConfig::Load(folder + "/config.json", file_system);
  if (!config.ok()) return config.status();
  const std::string model_type = architecture_override.empty()
                                     ? config->model_type()
                                     : std::string(architecture_override);
  absl::StatusOr<ArchitectureFactory> factory =
      FindArchitecture(model_type, config->label());
  if (!factory.ok()) return factory.status();
  absl::StatusOr<std::unique_ptr<casting::Checkpoint>> checkpoint =
      OpenHfCheckpoint(folder, file_system);
  if (!checkpoint.ok()) return checkpoint.status();
  absl::StatusOr<PrequantizedWeights> prequantized =
      PrequantizedWeights::Read(*config, **checkpoint);
  if (!prequantized.ok()) {
    return absl::Status(
        prequantized.status().code(),
        absl::StrCat(folder, ": ", prequantized.status().message()));
  }
  WeightPolicyOptions model_options = options;
  if (!prequantized->empty()) {
    model_options.prequantized =
        std::make_shared<const PrequantizedWeights>(*std::move(prequantized));
  }
  absl::StatusOr<std::unique_ptr<Model>> model =
      (*factory)(*config, std::move(*checkpoint), model_options);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(folder, " as ", model_type, ": ",
                                     model.status().message()));
  }
  if (NeedsCastingHooks(options)) {
    CastingHooks::Options hook_options;
    hook_options.prefetch = options.prefetch;
    hook_options.device = options.device;
    model = std::unique_ptr<Model>(
        std::make_unique<HookedModel>(*std::move(model), hook_options));
  }
  absl::StatusOr<std::unique_ptr<Model>> served =
      WithSentenceTransformerPipeline(folder, *std::move(model), file_system);
  if (served.ok() && model_options.prequantized != nullptr) {
    (*served)->set_storage_note(model_options.prequantized->note());
  }
  return served;
}

}  // namespace castserve::models
