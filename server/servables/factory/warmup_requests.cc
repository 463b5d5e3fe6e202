#include "server/servables/factory/warmup_requests.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "platform/file_system.h"
#include "platform/sanitized_text.h"
#include "server/servables/factory/model_boundary.h"
#include "server/servables/proto_dtypes.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

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
  absl::StatusOr<std::string> bytes = platform::FileSystem::Default()->ReadFile(
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

}  // namespace

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
      return absl::InvalidArgumentError(absl::StrCat(
          "warmup '", platform::SanitizeText(warmup.name(), 64), "' input ",
          name, " of shape [", absl::StrJoin(shape, ","),
          "] takes the warmup request past the limit of ", max_bytes,
          " bytes (--max-message-bytes)"));
    }
    request_bytes += bytes;
    absl::StatusOr<at::Tensor> tensor = MakeWarmupTensor(
        name, input, *dtype, shape, batched ? batch_size : 0, model_directory);
    if (!tensor.ok()) return tensor.status();
    inputs[name] = *std::move(tensor);
  }
  return inputs;
}

absl::Status RunWarmups(BatchingServedModel& served,
                        const inference::ModelConfig& config,
                        const std::string& model_directory,
                        const FactoryOptions& options) {
  const absl::Time deadline =
      options.clock->Now() + options.max_warmup_duration;
  for (const inference::ModelWarmup& warmup : config.model_warmup()) {
    absl::StatusOr<models::NamedTensors> inputs = MakeWarmupRequest(
        warmup, config, model_directory, options.max_warmup_request_bytes);
    if (!inputs.ok()) return inputs.status();
    const uint32_t count = std::max<uint32_t>(warmup.count(), 1);
    for (uint32_t i = 0; i < count; ++i) {
      if (options.clock->Now() > deadline) {
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

}  // namespace castserve
