#include "server/hf_served_model_factory.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/casting_policy.h"
#include "casting/device_memory.h"
#include "casting/device_probe.h"
#include "casting/file_system.h"
#include "casting/storage_format.h"
#include "casting/tracking_allocator.h"
#include "models/configured_footprint.h"
#include "models/model_loader.h"
#include "server/batching_served_model.h"
#include "server/generation_model_loader.h"
#include "server/log.h"
#include "server/model_config_loader.h"
#include "server/proto_dtypes.h"
#include "server/repository_boundary.h"
#include "server/server_flags.h"
#include "server/tensor_conversion.h"
#include "server/text_input.h"

namespace castserve {
namespace {

// The model config parameter Triton's PyTorch backend reads for the same.
constexpr char kIntraOpThreadsParameter[] = "INTRA_OP_THREAD_COUNT";

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

// Dims as a config lists them: without the batch dimension when batched.
absl::StatusOr<std::vector<int64_t>> ConfigDims(const models::TensorSpec& spec,
                                                bool batched) {
  if (!batched) return spec.shape;
  if (spec.shape.empty()) {
    return absl::InternalError(
        absl::StrCat("tensor ", spec.name, " has no batch dimension"));
  }
  return std::vector<int64_t>(spec.shape.begin() + 1, spec.shape.end());
}

absl::StatusOr<inference::DataType> ConfigDataTypeOf(
    const models::TensorSpec& spec) {
  const inference::DataType type = ConfigDataType(spec.dtype);
  if (type == inference::TYPE_INVALID) {
    return absl::InternalError(
        absl::StrCat("tensor ", spec.name, " has a dtype with no config type"));
  }
  return type;
}

const models::TensorSpec* FindSpec(const std::vector<models::TensorSpec>& specs,
                                   const std::string& name) {
  for (const models::TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string SpecNames(const std::vector<models::TensorSpec>& specs) {
  return absl::StrJoin(specs, ", ",
                       [](std::string* out, const models::TensorSpec& spec) {
                         absl::StrAppend(out, spec.name);
                       });
}

// Checks one configured tensor (`kind` "input" or "output") against the
// signature.
absl::Status CheckConfiguredTensor(
    absl::string_view kind, const std::string& name,
    inference::DataType data_type,
    const google::protobuf::RepeatedField<int64_t>& dims,
    const std::vector<models::TensorSpec>& specs, bool batched) {
  const models::TensorSpec* spec = FindSpec(specs, name);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", kind, " ", name, " is not an ", kind,
                     " of the model (", SpecNames(specs), ")"));
  }
  absl::StatusOr<inference::DataType> expected_type = ConfigDataTypeOf(*spec);
  if (!expected_type.ok()) return expected_type.status();
  if (data_type != *expected_type) {
    return absl::InvalidArgumentError(
        absl::StrCat("config ", kind, " ", name, " has data_type ",
                     inference::DataType_Name(data_type), "; the model's is ",
                     inference::DataType_Name(*expected_type)));
  }
  absl::StatusOr<std::vector<int64_t>> expected = ConfigDims(*spec, batched);
  if (!expected.ok()) return expected.status();
  bool match = dims.size() == static_cast<int>(expected->size());
  for (int i = 0; match && i < dims.size(); ++i) {
    match = (*expected)[i] == -1 ? dims[i] == -1 || dims[i] > 0
                                 : dims[i] == (*expected)[i];
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", kind, " ", name, " has dims [", absl::StrJoin(dims, ","),
        "]; the model's are [", absl::StrJoin(*expected, ","), "]",
        batched ? " (without the batch dimension)" : ""));
  }
  return absl::OkStatus();
}

// Name, data type and dims of a config input or output, from `spec`.
template <typename ConfigTensor>
absl::StatusOr<ConfigTensor> ConfigTensorOf(const models::TensorSpec& spec,
                                            bool batched) {
  absl::StatusOr<inference::DataType> type = ConfigDataTypeOf(spec);
  if (!type.ok()) return type.status();
  absl::StatusOr<std::vector<int64_t>> dims = ConfigDims(spec, batched);
  if (!dims.ok()) return dims.status();
  ConfigTensor tensor;
  tensor.set_name(spec.name);
  tensor.set_data_type(*type);
  tensor.mutable_dims()->Add(dims->begin(), dims->end());
  return tensor;
}

absl::Status FillInputs(const std::vector<models::TensorSpec>& specs,
                        inference::ModelConfig* config) {
  const bool batched = config->max_batch_size() > 0;
  for (const models::TensorSpec& spec : specs) {
    absl::StatusOr<inference::ModelInput> input =
        ConfigTensorOf<inference::ModelInput>(spec, batched);
    if (!input.ok()) return input.status();
    input->set_optional(spec.optional);
    *config->add_input() = *std::move(input);
  }
  return absl::OkStatus();
}

absl::Status FillOutputs(const std::vector<models::TensorSpec>& specs,
                         inference::ModelConfig* config) {
  const bool batched = config->max_batch_size() > 0;
  for (const models::TensorSpec& spec : specs) {
    absl::StatusOr<inference::ModelOutput> output =
        ConfigTensorOf<inference::ModelOutput>(spec, batched);
    if (!output.ok()) return output.status();
    *config->add_output() = *std::move(output);
  }
  return absl::OkStatus();
}

absl::Status CheckConfiguredSignature(
    const std::vector<models::TensorSpec>& inputs,
    const std::vector<models::TensorSpec>& outputs,
    const inference::ModelConfig& config) {
  const bool batched = config.max_batch_size() > 0;
  for (const inference::ModelInput& input : config.input()) {
    if (input.name() == kTextInputName) continue;  // ApplyTextSignature's.
    absl::Status valid =
        CheckConfiguredTensor("input", input.name(), input.data_type(),
                              input.dims(), inputs, batched);
    if (!valid.ok()) return valid;
  }
  for (const models::TensorSpec& spec : inputs) {
    if (config.input_size() == 0) break;  // Filled in from the signature.
    const bool listed =
        std::any_of(config.input().begin(), config.input().end(),
                    [&](const inference::ModelInput& input) {
                      return input.name() == spec.name;
                    });
    if (!listed && !spec.optional) {
      return absl::InvalidArgumentError(
          absl::StrCat("config lacks the model's required input ", spec.name));
    }
  }
  for (const inference::ModelOutput& output : config.output()) {
    absl::Status valid =
        CheckConfiguredTensor("output", output.name(), output.data_type(),
                              output.dims(), outputs, batched);
    if (!valid.ok()) return valid;
  }
  return absl::OkStatus();
}

const inference::ModelInput* FindConfiguredInput(
    const inference::ModelConfig& config, const std::string& name) {
  for (const inference::ModelInput& input : config.input()) {
    if (input.name() == name) return &input;
  }
  return nullptr;
}

// The bytes of a tensor of `shape` with `element_bytes` elements, or -1 if
// that is more than `limit_bytes` (never overflows: dims are non-negative).
int64_t BytesWithin(const std::vector<int64_t>& shape, int64_t element_bytes,
                    int64_t limit_bytes) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t bytes = element_bytes;
  for (int64_t dim : shape) {
    if (bytes > limit_bytes / dim) return -1;
    bytes *= dim;
  }
  return bytes <= limit_bytes ? bytes : -1;
}

// A regular file's bytes, refused when it holds more than `max_bytes`
// (a device such as /dev/zero is not a regular file).
absl::StatusOr<std::string> ReadFileBytes(const fs::path& path,
                                          int64_t max_bytes) {
  absl::StatusOr<std::string> bytes = casting::FileSystem::Default()->ReadFile(
      path.string(), static_cast<uint64_t>(max_bytes));
  if (bytes.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup data file ", path.string(), " holds more than ",
                     max_bytes, " bytes, the size of the input"));
  }
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warmup data file ", path.string(), " is not a readable regular file (",
        bytes.status().message(), ")"));
  }
  return bytes;
}

// One warmup input tensor of `shape` (batch dimension included).
absl::StatusOr<at::Tensor> MakeWarmupTensor(
    const std::string& name, const inference::ModelWarmup::Input& input,
    at::ScalarType dtype, const std::vector<int64_t>& shape, int64_t batch_size,
    const std::string& model_directory) {
  const at::TensorOptions options = at::TensorOptions().dtype(dtype);
  switch (input.input_data_type_case()) {
    case inference::ModelWarmup::Input::kRandomData:
      if (at::isFloatingType(dtype)) {
        return at::randn(shape).to(dtype);
      }
      return at::randint(0, 2, shape, at::kLong).to(dtype);
    case inference::ModelWarmup::Input::kInputDataFile:
      break;
    default:
      return at::zeros(shape, options);
  }
  absl::StatusOr<fs::path> path = ResolveInsideRepository(
      model_directory, input.input_data_file(), "warmup input_data_file");
  if (!path.ok()) return path.status();
  const int64_t total = c10::multiply_integers(shape) *
                        static_cast<int64_t>(at::elementSize(dtype));
  absl::StatusOr<std::string> bytes = ReadFileBytes(*path, total);
  if (!bytes.ok()) return bytes.status();
  at::Tensor tensor = at::empty(shape, options);
  const int64_t item = batch_size > 0 ? total / batch_size : total;
  const int64_t size = static_cast<int64_t>(bytes->size());
  if (size != total && size != item) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup data for input ", name, " has ", size,
                     " bytes; expected ", item, " (one item) or ", total));
  }
  auto* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t offset = 0; offset < total; offset += size) {
    std::copy(bytes->begin(), bytes->end(), data + offset);
  }
  return tensor;
}

absl::Status RunWarmups(BatchingServedModel& served,
                        const inference::ModelConfig& config,
                        const std::string& model_directory,
                        const FactoryOptions& options) {
  const absl::Time deadline = absl::Now() + options.max_warmup_duration;
  for (const inference::ModelWarmup& warmup : config.model_warmup()) {
    absl::StatusOr<models::NamedTensors> inputs = MakeWarmupRequest(
        warmup, config, model_directory, options.max_warmup_request_bytes);
    if (!inputs.ok()) return inputs.status();
    const uint32_t count = std::max<uint32_t>(warmup.count(), 1);
    for (uint32_t i = 0; i < count; ++i) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("warmups ran past the limit of ",
                         absl::FormatDuration(options.max_warmup_duration),
                         " (--max-warmup-seconds)"));
      }
      absl::Status status = served.Warmup(*inputs);
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("warmup '", warmup.name(),
                                         "' failed: ", status.message()));
      }
    }
  }
  return absl::OkStatus();
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
  absl::StatusOr<std::vector<casting::FileSystem::DirectoryEntry>> entries =
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

absl::Status WithContext(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// The text input of `model`, loaded from `folder`: the folder's tokenizer,
// truncating at model.max_sequence_length() (no limit without one). NotFound
// when the folder has no tokenizer; the tokenizer's error when it does not
// load; InvalidArgument when the model takes no token ids.
absl::StatusOr<std::unique_ptr<TextInput>> LoadTextInput(
    const std::string& folder, const models::Model& model) {
  // A tokenizer library that throws fails the text input, not the load.
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer =
      models::CatchExceptions([&] { return text::LoadTokenizer(folder); });
  if (absl::IsNotFound(tokenizer.status())) {
    return absl::NotFoundError(
        absl::StrCat("the model folder ", folder,
                     " has no tokenizer (tokenizer.json or tokenizer.model)"));
  }
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("the tokenizer of ", folder,
                     " does not load: ", tokenizer.status().message()));
  }
  return TextInput::Create(
      std::shared_ptr<const text::Tokenizer>(*std::move(tokenizer)),
      model.inputs(), model.max_sequence_length().value_or(0));
}

// The text input of `model` (loaded from `folder`), or an unavailable one
// that says why: a model serves its token inputs whatever its tokenizer.
// A tokenizer that is there but does not load is logged.
std::shared_ptr<const TextInput> TextInputFor(const std::string& folder,
                                              const models::Model& model,
                                              const std::string& model_name) {
  absl::StatusOr<std::unique_ptr<TextInput>> text =
      LoadTextInput(folder, model);
  if (text.ok()) return *std::move(text);
  if (!absl::IsNotFound(text.status())) {
    Log(LogLevel::kWarning, "model serves no text input",
        {{"model", model_name}, {"error", text.status().message()}});
  }
  return TextInput::Unavailable(
      absl::StrCat("input '", kTextInputName, "': ", text.status().message()));
}

}  // namespace

absl::Status CheckConfigLimits(const inference::ModelConfig& config,
                               const FactoryOptions& options) {
  const int instances = InstanceCount(config);
  if (instances > options.max_instances) {
    return absl::InvalidArgumentError(
        absl::StrCat("instance_group asks for ", instances,
                     " instances, above the limit of ", options.max_instances,
                     " (--max-instances-per-model)"));
  }
  for (const inference::ModelWarmup& warmup : config.model_warmup()) {
    if (warmup.count() > options.max_warmup_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warmup '", warmup.name().substr(0, 64), "' has count ",
          warmup.count(), ", above the limit of ", options.max_warmup_count));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<casting::Device> DeviceFromConfig(
    const inference::ModelConfig& config) {
  std::vector<casting::Device> devices;
  for (const inference::ModelInstanceGroup& group : config.instance_group()) {
    if (group.kind() != inference::ModelInstanceGroup::KIND_GPU) {
      devices.push_back(casting::Device::Cpu());
      continue;
    }
    if (group.gpus().empty()) devices.push_back(casting::Device::Cuda(0));
    for (int32_t gpu : group.gpus()) {
      if (gpu < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("instance_group KIND_GPU lists GPU ", gpu,
                         ": not a device ordinal"));
      }
      devices.push_back(casting::Device::Cuda(gpu));
    }
  }
  if (devices.empty()) return casting::Device::Cpu();
  for (const casting::Device& device : devices) {
    if (device != devices.front()) {
      return absl::UnimplementedError(absl::StrCat(
          "instance_group places the model on ", devices.front().name(),
          " and ", device.name(),
          ": a model's instances share one set of weights on one device"));
    }
  }
  return devices.front();
}

absl::StatusOr<models::WeightPolicyOptions> WeightPolicyFromConfig(
    const inference::WeightPolicy& weights) {
  models::WeightPolicyOptions options;
  switch (weights.residency()) {
    case inference::RESIDENCY_RESIDENT:
      options.residency = casting::Residency::kResident;
      break;
    case inference::RESIDENCY_MAPPED:
      options.residency = casting::Residency::kMapped;
      break;
    case inference::RESIDENCY_HOST:
      options.residency = casting::Residency::kResident;
      options.storage_on_host = true;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "weights.residency: unknown value ", weights.residency()));
  }
  options.compute_copy =
      weights.compute_copy() == inference::COMPUTE_COPY_TRANSIENT
          ? casting::ComputeCopyPolicy::kTransient
          : casting::ComputeCopyPolicy::kCached;
  options.eager = weights.materialization() == inference::MATERIALIZATION_EAGER;
  options.prefetch = weights.prefetch();
  options.reuse_transient_buffers = weights.reuse_transient_buffers();
  const inference::LayerwiseCasting& layerwise = weights.casting();
  absl::StatusOr<casting::ElementType> compute =
      ComputeElementType(layerwise.compute_dtype());
  if (!compute.ok()) return compute.status();
  options.compute_dtype = *compute;
  if (layerwise.storage_dtype() == inference::STORAGE_DTYPE_UNSPECIFIED) {
    return options;
  }
  absl::StatusOr<casting::ElementType> storage =
      StorageElementType(layerwise.storage_dtype());
  if (!storage.ok()) return storage.status();
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = *storage;
  policy.compute_dtype = *compute;
  // Scaling means nothing for non-fp8 storage; the proto says it is ignored.
  if (casting::IsFp8(*storage)) {
    absl::StatusOr<casting::Scaling> scaling =
        ScalingFromConfig(layerwise.scaling());
    if (!scaling.ok()) return scaling.status();
    policy.scaling = *scaling;
  }
  if (layerwise.no_default_skip_patterns()) policy.skip_modules_pattern.clear();
  policy.skip_modules_pattern.insert(policy.skip_modules_pattern.end(),
                                     layerwise.skip_modules_pattern().begin(),
                                     layerwise.skip_modules_pattern().end());
  policy.skip_modules_classes.assign(layerwise.skip_modules_classes().begin(),
                                     layerwise.skip_modules_classes().end());
  policy.non_blocking = layerwise.non_blocking();
  absl::StatusOr<casting::CastingPolicy> created =
      casting::CastingPolicy::Create(std::move(policy));
  if (!created.ok()) return WithContext(created.status(), "weights.casting: ");
  options.casting = *std::move(created);
  return options;
}

absl::StatusOr<std::string> CheckpointFolder(
    const std::string& model_directory, const std::string& checkpoint_path) {
  if (checkpoint_path.empty()) return model_directory;
  absl::StatusOr<fs::path> folder = ResolveInsideRepository(
      model_directory, checkpoint_path, "checkpoint.path");
  if (!folder.ok()) return folder.status();
  return folder->string();
}

absl::Status ApplySignature(const std::vector<models::TensorSpec>& inputs,
                            const std::vector<models::TensorSpec>& outputs,
                            inference::ModelConfig* config) {
  absl::Status valid = CheckConfiguredSignature(inputs, outputs, *config);
  if (valid.ok() && config->input_size() == 0) {
    valid = FillInputs(inputs, config);
  }
  if (valid.ok() && config->output_size() == 0) {
    valid = FillOutputs(outputs, config);
  }
  return valid;
}

absl::Status ApplyTextSignature(const TextInput& text,
                                inference::ModelConfig* config) {
  const std::vector<int64_t> dims = config->max_batch_size() > 0
                                        ? std::vector<int64_t>{1}
                                        : std::vector<int64_t>{-1, 1};
  for (const inference::ModelInput& input : config->input()) {
    if (input.name() != kTextInputName) continue;
    if (!text.available()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config lists input ", kTextInputName, ", but ",
                       text.unavailable_reason()));
    }
    if (input.data_type() != inference::TYPE_STRING ||
        !std::equal(input.dims().begin(), input.dims().end(), dims.begin(),
                    dims.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config input ", kTextInputName, " must be TYPE_STRING with dims [",
          absl::StrJoin(dims, ","), "] (one string per batch element)"));
    }
    return absl::OkStatus();
  }
  if (!text.available()) return absl::OkStatus();
  inference::ModelInput* added = config->add_input();
  added->set_name(kTextInputName);
  added->set_data_type(inference::TYPE_STRING);
  added->mutable_dims()->Add(dims.begin(), dims.end());
  added->set_optional(true);
  return absl::OkStatus();
}

absl::StatusOr<models::NamedTensors> MakeWarmupRequest(
    const inference::ModelWarmup& warmup, const inference::ModelConfig& config,
    const std::string& model_directory, int64_t max_bytes) {
  const bool batched = config.max_batch_size() > 0;
  const int64_t batch_size = std::max<int64_t>(warmup.batch_size(), 1);
  if (batched && batch_size > config.max_batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup '", warmup.name(), "' has batch_size ", batch_size,
                     " above max_batch_size ", config.max_batch_size()));
  }
  models::NamedTensors inputs;
  int64_t request_bytes = 0;
  for (const auto& [name, input] : warmup.inputs()) {
    const inference::ModelInput* configured = FindConfiguredInput(config, name);
    if (configured == nullptr || configured->data_type() != input.data_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat("warmup '", warmup.name(), "' input ", name,
                       " is not a model input of data type ",
                       inference::DataType_Name(input.data_type())));
    }
    std::vector<int64_t> shape;
    if (batched) shape.push_back(batch_size);
    shape.insert(shape.end(), input.dims().begin(), input.dims().end());
    if (std::any_of(shape.begin(), shape.end(),
                    [](int64_t d) { return d < 0; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warmup '", warmup.name(), "' input ", name, " has a negative dim"));
    }
    absl::StatusOr<at::ScalarType> dtype =
        ScalarTypeFromConfig(input.data_type());
    if (!dtype.ok()) return dtype.status();
    const int64_t bytes =
        BytesWithin(shape, at::elementSize(*dtype), max_bytes - request_bytes);
    if (bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("warmup '", warmup.name().substr(0, 64), "' input ",
                       name, " of shape [", absl::StrJoin(shape, ","),
                       "] takes the warmup request past the limit of ",
                       max_bytes, " bytes (--max-message-bytes)"));
    }
    request_bytes += bytes;
    absl::StatusOr<at::Tensor> tensor = MakeWarmupTensor(
        name, input, *dtype, shape, batched ? batch_size : 0, model_directory);
    if (!tensor.ok()) return tensor.status();
    inputs[name] = *std::move(tensor);
  }
  return inputs;
}

absl::StatusOr<int> IntraOpThreadsFor(const inference::ModelConfig& config,
                                      int default_threads,
                                      int hardware_threads) {
  auto parameter = config.parameters().find(kIntraOpThreadsParameter);
  if (parameter != config.parameters().end()) {
    const std::string& value = parameter->second.string_value();
    int threads = 0;
    if (!absl::SimpleAtoi(value, &threads) || threads < 1 ||
        threads > kMaxThreads) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", kIntraOpThreadsParameter, ": '", value.substr(0, 64),
          "' is not a thread count between 1 and ", kMaxThreads));
    }
    return threads;
  }
  if (default_threads > 0) return default_threads;
  return std::max(1, hardware_threads / InstanceCount(config));
}

HfServedModelFactory::HfServedModelFactory(FactoryOptions options)
    : options_(options) {
  if (options_.inter_op_threads > 0) {
    // LibTorch accepts this once, before its pool starts.
    absl::Status set = models::CatchExceptions([this]() -> absl::Status {
      at::set_num_interop_threads(options_.inter_op_threads);
      return absl::OkStatus();
    });
    if (!set.ok()) {
      Log(LogLevel::kWarning, "inter-op threads not set",
          {{"error", set.message()}});
    }
  }
  absl::StatusOr<casting::TrackingAllocator*> installed =
      casting::TrackingAllocator::InstallTrackingCpuAllocator();
  if (!installed.ok()) {
    Log(LogLevel::kWarning,
        "tracking allocator not installed; models are measured by their "
        "weights alone",
        {{"error", installed.status().ToString()}});
  }
  // Per-model GPU bytes, attributed under the tracking allocator's tags
  // (casting/device_model_memory.h); a no-op without CUDA or a device.
  casting::InstallCudaModelMemoryTracker();
}

absl::StatusOr<std::shared_ptr<ServedModel>> HfServedModelFactory::Create(
    const std::string& model_directory, const inference::ModelConfig& config,
    std::shared_ptr<const models::Cancellation> cancellation) {
  // LibTorch may throw anywhere in a load (a tensor it cannot allocate, a
  // checkpoint it rejects): the load fails, nothing else does.
  return models::CatchExceptions(
      [&] { return Load(model_directory, config, std::move(cancellation)); });
}

absl::StatusOr<HfServedModelFactory::LoadPlan> HfServedModelFactory::PlanLoad(
    const std::string& model_directory,
    const inference::ModelConfig& config) const {
  absl::StatusOr<casting::Device> device = DeviceFromConfig(config);
  if (!device.ok()) return device.status();
  if (absl::Status available = casting::CheckDeviceAvailable(*device);
      !available.ok()) {
    return available;
  }
  if (absl::Status valid = CheckConfigLimits(config, options_); !valid.ok()) {
    return valid;
  }
  LoadPlan plan;
  absl::StatusOr<int> intra_op_threads = IntraOpThreadsFor(
      config, options_.intra_op_threads,
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (!intra_op_threads.ok()) return intra_op_threads.status();
  plan.intra_op_threads = *intra_op_threads;
  absl::StatusOr<std::string> folder =
      CheckpointFolder(model_directory, config.checkpoint().path());
  if (!folder.ok()) return folder.status();
  plan.folder = *std::move(folder);
  if (absl::Status inside =
          CheckInsideRepository(model_directory, plan.folder, config,
                                options_.allow_symlinks_outside_repository);
      !inside.ok()) {
    return inside;
  }
  absl::StatusOr<models::WeightPolicyOptions> options =
      WeightPolicyFromConfig(config.weights());
  if (!options.ok()) return options.status();
  plan.weights = *std::move(options);
  plan.weights.device = *device;
  return plan;
}

absl::StatusOr<std::unique_ptr<models::Model>> HfServedModelFactory::BuildModel(
    const LoadPlan& plan, const models::WeightPolicyOptions& weights,
    const inference::ModelConfig& config, const TrackedModelId& tracked_id) {
  absl::StatusOr<std::unique_ptr<models::Model>> model;
  {
    casting::ScopedModelTag tag(tracked_id.id());
    model = models::LoadHfModel(plan.folder, weights, config.architecture());
  }
  if (!model.ok()) {
    return WithContext(model.status(), absl::StrCat(plan.folder, ": "));
  }
  return model;
}

absl::StatusOr<int64_t> HfServedModelFactory::ProjectedBytes(
    const std::string& model_directory, const inference::ModelConfig& config) {
  return models::CatchExceptions([&]() -> absl::StatusOr<int64_t> {
    return Project(model_directory, config);
  });
}

absl::StatusOr<int64_t> HfServedModelFactory::Project(
    const std::string& model_directory, const inference::ModelConfig& config) {
  absl::StatusOr<LoadPlan> plan = PlanLoad(model_directory, config);
  if (!plan.ok()) return plan.status();
  // Built lazily whatever the policy says (eager would read every weight):
  // the module tree and its weights' headers are what the projection needs.
  models::WeightPolicyOptions lazy = plan->weights;
  lazy.eager = false;
  std::unique_ptr<TrackedModelId> tracked_id =
      TrackedModelId::Register(config.name());
  absl::StatusOr<std::unique_ptr<models::Model>> model =
      BuildModel(*plan, lazy, config, *tracked_id);
  if (!model.ok()) return model.status();
  // What the lazy build allocated is buffers beside the weights (position
  // ids, rotary tables): the served model holds them too.
  int64_t bytes = tracked_id->live_bytes() +
                  models::ConfiguredFootprint((*model)->root(), plan->weights,
                                              InstanceCount(config))
                      .owned_bytes();
  if (config.has_generation()) {
    bytes += WithGenerationDefaults(config.generation()).kv_cache_bytes();
  }
  return bytes;
}

absl::StatusOr<std::shared_ptr<ServedModel>> HfServedModelFactory::Load(
    const std::string& model_directory, const inference::ModelConfig& config,
    std::shared_ptr<const models::Cancellation> cancellation) {
  absl::StatusOr<LoadPlan> plan = PlanLoad(model_directory, config);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<TrackedModelId> tracked_id =
      TrackedModelId::Register(config.name());
  absl::StatusOr<std::unique_ptr<models::Model>> model =
      BuildModel(*plan, plan->weights, config, *tracked_id);
  if (!model.ok()) return model.status();
  const std::string& folder = plan->folder;
  if (config.has_generation()) {
    return LoadGenerationModel(folder, config, *std::move(model),
                               std::move(tracked_id), std::move(cancellation));
  }
  std::shared_ptr<const TextInput> text =
      TextInputFor(folder, **model, config.name());
  inference::ModelConfig effective = config;
  if (effective.platform().empty()) effective.set_platform(kDefaultPlatform);
  if (effective.backend().empty()) effective.set_backend(kDefaultBackend);
  absl::Status valid =
      ApplySignature((*model)->inputs(), (*model)->outputs(), &effective);
  if (valid.ok()) valid = ApplyTextSignature(*text, &effective);
  if (!valid.ok()) return valid;
  absl::StatusOr<std::unique_ptr<BatchingServedModel>> served =
      BatchingServedModel::Create(
          std::move(effective),
          std::shared_ptr<models::Model>(*std::move(model)),
          std::move(tracked_id), plan->intra_op_threads,
          std::move(cancellation), std::move(text));
  if (!served.ok()) return served.status();
  if (absl::Status warm =
          RunWarmups(**served, (*served)->config(), model_directory, options_);
      !warm.ok()) {
    return warm;
  }
  return std::shared_ptr<ServedModel>(*std::move(served));
}

}  // namespace castserve
