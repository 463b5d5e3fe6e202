#include "models/test_util/tensor_files.h"

#include <ATen/ATen.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/codec/storage_format.h"
#include "casting/device/torch_types.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"

namespace castserve::models::test_util {

absl::Status WriteSafetensors(
    const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<casting::test_util::HeaderTensor> header;
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const casting::DtypeRow* row =
        casting::FindByTorchScalarType(tensor.scalar_type());
    if (row == nullptr || row->checkpoint_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, ": unsupported dtype"));
    }
    at::Tensor contiguous = tensor.contiguous();
    const size_t bytes = contiguous.numel() * contiguous.element_size();
    casting::test_util::HeaderTensor entry;
    entry.name = name;
    entry.dtype = std::string(row->checkpoint_name);
    entry.shape = contiguous.sizes().vec();
    entry.begin = data.size();
    entry.end = data.size() + bytes;
    data.append(static_cast<const char*>(contiguous.data_ptr()), bytes);
    header.push_back(std::move(entry));
  }
  return casting::test_util::WriteSafetensorsFile(
      path, casting::test_util::MakeHeaderJson(header), data);
}

absl::StatusOr<std::map<std::string, at::Tensor>> ReadSafetensors(
    const std::string& path) {
  absl::StatusOr<std::unique_ptr<casting::Checkpoint>> checkpoint =
      casting::OpenSafetensors(path);
  if (!checkpoint.ok()) return checkpoint.status();
  std::map<std::string, at::Tensor> tensors;
  for (const casting::TensorEntry& entry : (*checkpoint)->tensors()) {
    const std::optional<at::ScalarType> dtype =
        casting::TorchScalarType(entry.dtype);
    if (!dtype.has_value() || !casting::RowOf(entry.dtype).torch_exact) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", entry.name, " has an unread dtype"));
    }
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions(*dtype));
    absl::Status copied =
        (*checkpoint)
            ->CopyTo(entry,
                     absl::MakeSpan(static_cast<uint8_t*>(tensor.data_ptr()),
                                    entry.size_bytes));
    if (!copied.ok()) return copied;
    tensors[entry.name] = tensor;
  }
  return tensors;
}

std::string MakeScratchDir(absl::string_view name) {
  static std::atomic<int> counter{0};
  const char* root = getenv("TEST_TMPDIR");
  std::string path = absl::StrCat(root != nullptr ? root : "/tmp", "/", name,
                                  "_", getpid(), "_", counter++);
  mkdir(path.c_str(), 0755);
  return path;
}

double RelativeMaxError(const at::Tensor& a, const at::Tensor& reference) {
  at::Tensor a32 = a.to(at::kFloat);
  at::Tensor ref32 = reference.to(at::kFloat);
  const double scale =
      std::max(ref32.abs().max().item<double>(), static_cast<double>(1e-6));
  return (a32 - ref32).abs().max().item<double>() / scale;
}

double CosineSimilarity(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor a64 = a.to(at::kDouble).flatten();
  at::Tensor b64 = b.to(at::kDouble).flatten();
  const double denominator =
      a64.norm().item<double>() * b64.norm().item<double>();
  return denominator == 0 ? 0 : (a64 * b64).sum().item<double>() / denominator;
}

std::vector<std::string> CastFormatNames() {
  std::vector<std::string> names;
  for (const casting::StorageFormat& format : casting::AllStorageFormats()) {
    if (format.element == casting::ElementType::kF32) continue;
    names.push_back(format.ToString());
  }
  return names;
}

}  // namespace castserve::models::test_util
