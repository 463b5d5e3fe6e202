// Round-trips data through the CUDA codec and compares every byte with the
// CPU reference. Prints one line per (format, compute type); exits 1 on any
// mismatch. Without a CUDA device it prints "no CUDA device" and exits 0.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "casting/codec/codec.h"
#include "casting/codec/codec_cuda.h"
#include "casting/codec/storage_format.h"

namespace castserve::casting {
namespace {

constexpr int64_t kRows = 13;
constexpr int64_t kElements = kRows * 7919;

// Finite values over many binades plus NaN, inf and zeros, in `type`.
std::vector<uint8_t> MakeInput(ElementType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> log2_magnitude(-30.0f, 20.0f);
  const float specials[] = {0.0f, -0.0f, NAN, -INFINITY, INFINITY, 464.0f};
  const int64_t size = ElementSizeBytes(type);
  std::vector<uint8_t> bytes(kElements * size);
  for (int64_t i = 0; i < kElements; ++i) {
    float value = std::exp2(log2_magnitude(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    if (rng() % 64 == 0) value = specials[rng() % 6];
    const uint32_t bits = F32ToElementBits(type, value);
    std::memcpy(&bytes[i * size], &bits, size);
  }
  return bytes;
}

// Copies `host` to a new device buffer; null on failure.
void* ToDevice(const void* host, int64_t bytes) {
  void* device = nullptr;
  if (CudaAllocate(bytes > 0 ? bytes : 1, &device) != kCudaCodecOk)
    return nullptr;
  if (CudaCopyToDevice(device, host, bytes) != kCudaCodecOk) return nullptr;
  return device;
}

template <typename T>
std::vector<T> FromDevice(const void* device, int64_t count) {
  std::vector<T> host(count);
  CudaCopyToHost(host.data(), device, count * sizeof(T));
  return host;
}

// Encodes and decodes on both sides; returns true when every byte agrees.
bool CheckPair(StorageFormat format, ElementType compute) {
  const std::vector<uint8_t> input = MakeInput(compute, 7);
  const int64_t stored_bytes = kElements * format.element_size_bytes();
  const int64_t decoded_bytes = kElements * ElementSizeBytes(compute);
  CodecOptions reference;
  reference.isa = CodecIsa::kReference;
  std::vector<uint8_t> cpu_stored(stored_bytes), cpu_decoded(decoded_bytes);
  std::vector<float> cpu_scales(kRows, 1.0f);
  if (!Encode(compute, input.data(), kElements, kRows, format,
              cpu_stored.data(), cpu_scales.data(), reference)
           .ok() ||
      !Decode(format, cpu_stored.data(), cpu_scales.data(), kElements, kRows,
              compute, cpu_decoded.data(), reference)
           .ok()) {
    std::printf("CPU codec failed\n");
    return false;
  }
  void* d_input = ToDevice(input.data(), input.size());
  void* d_stored = ToDevice(cpu_stored.data(), stored_bytes);  // Overwritten.
  void* d_scales = ToDevice(cpu_scales.data(), kRows * sizeof(float));
  void* d_decoded = ToDevice(cpu_decoded.data(), decoded_bytes);
  const int encode_error =
      CudaEncode(compute, d_input, kElements, kRows, format, d_stored,
                 static_cast<float*>(d_scales), nullptr);
  const int decode_error =
      CudaDecode(format, d_stored, static_cast<const float*>(d_scales),
                 kElements, kRows, compute, d_decoded, nullptr);
  CudaSynchronize(nullptr);
  const bool encode_ok =
      encode_error == kCudaCodecOk &&
      FromDevice<uint8_t>(d_stored, stored_bytes) == cpu_stored &&
      (!format.is_scaled() || FromDevice<float>(d_scales, kRows) == cpu_scales);
  const bool decode_ok =
      decode_error == kCudaCodecOk &&
      FromDevice<uint8_t>(d_decoded, decoded_bytes) == cpu_decoded;
  for (void* buffer : {d_input, d_stored, d_scales, d_decoded}) {
    CudaRelease(buffer);
  }
  std::printf("%-20s %-5s encode %-8s decode %s\n", format.ToString().c_str(),
              std::string(ElementTypeName(compute)).c_str(),
              encode_ok ? "OK" : CudaCodecErrorName(encode_error),
              decode_ok ? "OK" : CudaCodecErrorName(decode_error));
  return encode_ok && decode_ok;
}

int Run() {
  if (CudaDeviceCount() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  bool all_ok = true;
  for (const StorageFormat& format : AllStorageFormats()) {
    for (ElementType compute :
         {ElementType::kF32, ElementType::kBF16, ElementType::kF16}) {
      all_ok &= CheckPair(format, compute);
    }
  }
  std::printf("%s\n",
              all_ok ? "all CUDA results match the CPU reference" : "MISMATCH");
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace castserve::casting

int main() { return castserve::casting::Run(); }
