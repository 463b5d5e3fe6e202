#include "casting/device/torch_types.h"

#include <array>
#include <cstdlib>
#include <iostream>

#include "absl/strings/match.h"

namespace castserve::casting {
namespace {

using Resolved = std::array<std::optional<c10::ScalarType>, kNumDTypes>;

std::optional<c10::ScalarType> ScalarTypeNamed(absl::string_view name) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto type = static_cast<c10::ScalarType>(i);
    if (name == c10::toString(type)) return type;
  }
  return std::nullopt;
}

// Every row's torch_name as a c10::ScalarType, indexed by DType.
const Resolved& ResolvedTypes() {
  static const Resolved* const resolved = [] {
    auto* types = new Resolved();
    for (const DtypeRow& row : AllDtypeRows()) {
      if (row.torch_name.empty()) continue;
      std::optional<c10::ScalarType> type = ScalarTypeNamed(row.torch_name);
      if (!type.has_value()) {
        std::cerr << "castserve: dtype table names LibTorch dtype '"
                  << row.torch_name << "', which LibTorch does not have"
                  << std::endl;
        std::abort();
      }
      (*types)[static_cast<int>(row.dtype)] = type;
    }
    return types;
  }();
  return *resolved;
}

}  // namespace

c10::ScalarType TorchScalarType(ElementType type) {
  // Every element row names its LibTorch type (dtype_table_test).
  return *ResolvedTypes()[static_cast<int>(RowOf(type).dtype)];
}

std::optional<c10::ScalarType> TorchScalarType(DType dtype) {
  return ResolvedTypes()[static_cast<int>(dtype)];
}

const DtypeRow* FindByTorchScalarType(c10::ScalarType type) {
  for (const DtypeRow& row : AllDtypeRows()) {
    if (row.torch_exact && TorchScalarType(row.dtype) == type) return &row;
  }
  return nullptr;
}

c10::Device TorchDevice(const Device& device) {
  if (device.is_cpu()) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.index()));
}

std::optional<Device> DeviceOf(const c10::Device& device) {
  if (device.is_cpu()) return Device::Cpu();
  if (device.is_cuda())
    return Device::Cuda(device.has_index() ? device.index() : 0);
  return std::nullopt;
}

bool IsOutOfMemoryMessage(absl::string_view message) {
  return absl::StrContains(message, "out of memory") ||
         absl::StrContains(message, "not enough memory") ||
         absl::StrContains(message, "can't allocate memory");
}

}  // namespace castserve::casting
