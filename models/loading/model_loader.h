// Loading a Hugging Face checkpoint folder as a Model, and the registry of
// architectures it chooses from.
//
// A folder holds `config.json` and one of `model.safetensors`,
// `model.safetensors.index.json` (sharded) or `pytorch_model.bin` (tried in
// that order). The architecture is the config's `model_type`, unless the
// caller overrides it. Building a model reads config.json and the checkpoint
// headers only: no weight data page is touched before the first forward
// (unless the policy is eager).
#ifndef CASTSERVE_MODELS_LOADING_MODEL_LOADER_H_
#define CASTSERVE_MODELS_LOADING_MODEL_LOADER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/formats/checkpoint.h"
#include "models/loading/hf_config.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"
#include "platform/file_system.h"

namespace castserve::models {

// Builds one architecture's module tree from its config and checkpoint.
// Reads no weight data unless options.eager. Typically finds its key prefix
// with FindKeyPrefix and makes a WeightFactory with it. Errors name the
// missing key or bad config value.
using ArchitectureFactory =
    std::function<absl::StatusOr<std::unique_ptr<Model>>(
        const HfConfig& config,
        std::shared_ptr<const casting::Checkpoint> checkpoint,
        const WeightPolicyOptions& options)>;

// What an architecture says of itself when it registers.
struct ArchitectureTraits {
  // Its models are IncrementalDecoders: a `generation` block may serve them.
  bool generates = false;
};

// Registers `model_type` ("bert", "llama", ...). AlreadyExists if it is
// registered; InvalidArgument if empty. Thread-safe.
absl::Status RegisterArchitecture(std::string model_type,
                                  ArchitectureFactory factory,
                                  ArchitectureTraits traits = {});

// Registers at static-initialization time; aborts on a duplicate name. Use
// at namespace scope in the architecture's .cc, whose cc_library must set
// `alwayslink = 1`:
//   const ArchitectureRegistration kRegistration("bert", &CreateBert);
class ArchitectureRegistration {
 public:
  ArchitectureRegistration(std::string model_type, ArchitectureFactory factory,
                           ArchitectureTraits traits = {});
};

// The registered model types, sorted.
std::vector<std::string> RegisteredArchitectures();

// The registered model types that generate (ArchitectureTraits::generates),
// sorted: what a `generation` block may serve.
std::vector<std::string> GenerativeArchitectures();

// Opens the checkpoint of `folder` (headers only) through `file_system`.
// NotFound listing the file names tried when there is none.
absl::StatusOr<std::unique_ptr<casting::Checkpoint>> OpenHfCheckpoint(
    const std::string& folder,
    platform::FileSystem* file_system = platform::FileSystem::Default());

// Loads `folder` as a Model under `options`. `architecture_override`, if not
// empty, replaces config.json's model_type. An unknown architecture is
// InvalidArgument listing the registered ones. With transient compute copies
// or options.prefetch the model comes with casting hooks attached (prefetch
// if options.prefetch), so that only the running module holds transient
// compute copies and the next module's are decoded while it runs. A folder
// with a sentence-transformers modules.json gains its sentence_embedding
// output (sentence_embedding_model.h; a malformed or unsupported pipeline is
// InvalidArgument naming the file). Files are read through `file_system`.
absl::StatusOr<std::unique_ptr<Model>> LoadHfModel(
    const std::string& folder, const WeightPolicyOptions& options,
    absl::string_view architecture_override = "",
    platform::FileSystem* file_system = platform::FileSystem::Default());

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LOADING_MODEL_LOADER_H_
