#include "casting/device/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace castserve::casting {
namespace {

// Far above any machine's device count; keeps index() an int with room.
constexpr int kMaxCudaIndex = 1023;

absl::Status BadName(absl::string_view name) {
  return absl::InvalidArgumentError(
      absl::StrCat("device '", name.substr(0, 64),
                   "' is not 'cpu', 'cuda' or 'cuda:N' (N a device index)"));
}

}  // namespace

absl::StatusOr<Device> Device::Parse(absl::string_view name) {
  if (name == "cpu") return Cpu();
  if (name == "cuda") return Cuda(0);
  absl::string_view index_text = name;
  if (!absl::ConsumePrefix(&index_text, "cuda:") || index_text.empty() ||
      index_text.size() > 4 ||
      index_text.find_first_not_of("0123456789") != absl::string_view::npos) {
    return BadName(name);
  }
  int index = 0;
  if (!absl::SimpleAtoi(index_text, &index) || index > kMaxCudaIndex) {
    return BadName(name);
  }
  return Cuda(index);
}

std::string Device::name() const {
  return is_cpu() ? "cpu" : absl::StrCat("cuda:", index_);
}

}  // namespace castserve::casting
