// Device: where a model's tensors live and its forward runs — the CPU or one
// CUDA device. A LibTorch-free value type: config parsing, the weight policy
// and the server name devices with it; casting/device/torch_types.h is the one
// place that turns it into an at::Device.
//
// Names are LibTorch's: "cpu", "cuda:N". Thread-compatible value type.
#ifndef CASTSERVE_CASTING_DEVICE_DEVICE_H_
#define CASTSERVE_CASTING_DEVICE_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace castserve::casting {

class Device {
 public:
  enum class Kind { kCpu, kCuda };

  // The CPU (the default).
  Device() = default;
  static Device Cpu() { return Device(); }
  // CUDA device `index` (>= 0; not checked against the visible devices:
  // device_probe.h does that where a model is placed).
  static Device Cuda(int index) { return Device(Kind::kCuda, index); }

  // "cpu" or "cuda:N" (N a decimal index, at most 1023); "cuda" alone is
  // "cuda:0". InvalidArgument for anything else.
  static absl::StatusOr<Device> Parse(absl::string_view name);

  Kind kind() const { return kind_; }
  bool is_cpu() const { return kind_ == Kind::kCpu; }
  bool is_cuda() const { return kind_ == Kind::kCuda; }
  // 0 for the CPU.
  int index() const { return index_; }
  // "cpu" or "cuda:N": Parse(name()) == *this.
  std::string name() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.kind_ == b.kind_ && a.index_ == b.index_;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }

 private:
  Device(Kind kind, int index) : kind_(kind), index_(index) {}

  Kind kind_ = Kind::kCpu;
  int index_ = 0;
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_DEVICE_DEVICE_H_
