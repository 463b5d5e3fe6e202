// Codec throughput for each (storage, compute) pair, side by side with
// LibTorch's own conversion of the same data: `.to()`, and `copy_` into a
// preallocated tensor; for fp8, LibTorch's float8 dtypes (plain pairs) and
// `.to()` followed by the scale multiply (scaled pairs, decode only), and
// castserve's scalar reference and lookup-table kernels.
//
// Usage: bazel run -c opt //benchmarks:codec_benchmark -- [num_elements] [reps]
//        (default 64M elements, 5)
// GB/s counts bytes read plus bytes written; times are the best of `reps`.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "casting/device/torch_types.h"

namespace castserve::casting {
namespace {

struct Config {
  int64_t num_elements = int64_t{64} << 20;
  int reps = 5;
  int64_t num_rows = 8192;  // For per-row scaling: 8192 rows of 8192.
};

double BestSeconds(int reps, const std::function<void()>& run) {
  run();  // Warm-up: touches every page of the output.
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    const std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

void PrintHeader() {
  std::printf("%-30s %-26s %9s %8s %8s %8s\n", "pair", "implementation", "ms",
              "GB/s", "Gelem/s", "vs base");
}

// The first row printed for a pair is the baseline of the "vs base" column.
void PrintRow(const std::string& pair, const std::string& impl, double seconds,
              int64_t n, int64_t bytes_per_element, double baseline_seconds) {
  std::printf("%-30s %-26s %9.2f %8.2f %8.3f %7.2fx\n", pair.c_str(),
              impl.c_str(), seconds * 1e3,
              n * bytes_per_element / seconds / 1e9, n / seconds / 1e9,
              baseline_seconds / seconds);
}

// Holds one tensor's data in every format the benchmark reads from.
struct Inputs {
  std::vector<uint8_t> by_format[kNumElementTypes][3];  // [element][scaling]
  std::vector<float> scales[3];
};

Inputs MakeInputs(const Config& config) {
  std::vector<float> values(config.num_elements);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (float& value : values) value = normal(rng);
  Inputs inputs;
  for (int e = 0; e < kNumElementTypes; ++e) {
    for (Scaling scaling :
         {Scaling::kNone, Scaling::kPerTensor, Scaling::kPerRow}) {
      const StorageFormat format{static_cast<ElementType>(e), scaling};
      if (!format.Validate().ok()) continue;
      const int s = static_cast<int>(scaling);
      inputs.by_format[e][s].resize(config.num_elements *
                                    format.element_size_bytes());
      inputs.scales[s].resize(config.num_rows);
      if (!Encode(ElementType::kF32, values.data(), config.num_elements,
                  config.num_rows, format, inputs.by_format[e][s].data(),
                  inputs.scales[s].data())
               .ok()) {
        std::fprintf(stderr, "encode failed\n");
        std::exit(1);
      }
    }
  }
  return inputs;
}

CodecOptions OptionsFor(CodecIsa isa, int threads) {
  CodecOptions options;
  options.isa = isa;
  options.max_threads = threads;
  return options;
}

// One (storage, compute) pair in one direction.
struct Pair {
  StorageFormat format;
  ElementType compute;
  bool encode;

  std::string Name() const {
    const std::string storage = format.ToString();
    const std::string compute_name(ElementTypeName(compute));
    return encode ? compute_name + " -> " + storage + " (enc)"
                  : storage + " -> " + compute_name;
  }
  int64_t BytesPerElement() const {
    return format.element_size_bytes() + ElementSizeBytes(compute);
  }
};

double RunCodec(const Config& config, const Inputs& inputs, const Pair& pair,
                const CodecOptions& options, int reps) {
  const int e = static_cast<int>(pair.format.element);
  const int s = static_cast<int>(pair.format.scaling);
  const int c = static_cast<int>(pair.compute);
  const int64_t n = config.num_elements;
  std::vector<uint8_t> out(n * (pair.encode ? pair.format.element_size_bytes()
                                            : ElementSizeBytes(pair.compute)));
  std::vector<float> scales(config.num_rows);
  return BestSeconds(reps, [&] {
    absl::Status status =
        pair.encode ? Encode(pair.compute, inputs.by_format[c][0].data(), n,
                             config.num_rows, pair.format, out.data(),
                             scales.data(), options)
                    : Decode(pair.format, inputs.by_format[e][s].data(),
                             inputs.scales[s].data(), n, config.num_rows,
                             pair.compute, out.data(), options);
    if (!status.ok()) std::exit(1);
  });
}

// LibTorch's dtype for an element type, float8 included (castserve itself
// keeps fp8 as bytes: TorchScalarType).
at::ScalarType LibTorchDtype(ElementType type) {
  switch (type) {
    case ElementType::kF8E4M3FN:
      return at::kFloat8_e4m3fn;
    case ElementType::kF8E5M2:
      return at::kFloat8_e5m2;
    default:
      return TorchScalarType(type);
  }
}

// LibTorch's conversion of the same data: `.to()` allocates, copy_ doesn't.
// A scaled decode is `.to()` then a multiply by the scales (per row:
// broadcast over [rows, columns]); LibTorch has no scaled fp8 encode.
void RunTorch(const Config& config, const Inputs& inputs, const Pair& pair,
              double* to_seconds, double* copy_seconds) {
  const ElementType from = pair.encode ? pair.compute : pair.format.element;
  const ElementType to = pair.encode ? pair.format.element : pair.compute;
  const int scaling = static_cast<int>(pair.format.scaling);
  const int source_scaling = pair.encode ? 0 : scaling;
  at::Tensor src = at::from_blob(
      const_cast<uint8_t*>(
          inputs.by_format[static_cast<int>(from)][source_scaling].data()),
      {config.num_rows, config.num_elements / config.num_rows},
      at::TensorOptions().dtype(LibTorchDtype(from)));
  at::Tensor dst =
      at::empty(src.sizes(), at::TensorOptions().dtype(LibTorchDtype(to)));
  at::Tensor scales = at::from_blob(
      const_cast<float*>(inputs.scales[scaling].data()), {config.num_rows, 1},
      at::TensorOptions().dtype(at::kFloat));
  if (pair.format.scaling == Scaling::kPerTensor) scales = scales[0][0];
  if (pair.format.is_scaled()) {
    *to_seconds = BestSeconds(
        config.reps, [&] { (void)src.to(LibTorchDtype(to)).mul_(scales); });
    *copy_seconds =
        BestSeconds(config.reps, [&] { dst.copy_(src).mul_(scales); });
    return;
  }
  *to_seconds =
      BestSeconds(config.reps, [&] { (void)src.to(LibTorchDtype(to)); });
  *copy_seconds = BestSeconds(config.reps, [&] { dst.copy_(src); });
}

void BenchmarkPair(const Config& config, const Inputs& inputs,
                   const Pair& pair) {
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  const std::string best = std::string(CodecIsaName(BestCodecIsa()));
  // LibTorch has every pair but the scaled fp8 encodes.
  const bool torch_has_pair = !(pair.encode && pair.format.is_scaled());
  const int64_t n = config.num_elements;
  const int64_t bytes = pair.BytesPerElement();
  double base;
  if (torch_has_pair) {
    double to_seconds, copy_seconds;
    RunTorch(config, inputs, pair, &to_seconds, &copy_seconds);
    base = to_seconds;
    const bool scaled = pair.format.is_scaled();
    PrintRow(pair.Name(), scaled ? "libtorch .to() * scale" : "libtorch .to()",
             to_seconds, n, bytes, base);
    PrintRow(pair.Name(), scaled ? "libtorch copy_ * scale" : "libtorch copy_",
             copy_seconds, n, bytes, base);
  }
  if (!torch_has_pair) {
    base =
        RunCodec(config, inputs, pair, OptionsFor(CodecIsa::kReference, 1), 1);
    PrintRow(pair.Name(), "scalar reference, 1 thr", base, n, bytes, base);
  }
  if (IsFp8(pair.format.element) && !pair.encode) {
    const double lut =
        RunCodec(config, inputs, pair, OptionsFor(CodecIsa::kPortable, threads),
                 config.reps);
    PrintRow(pair.Name(), "lut (portable), all thr", lut, n, bytes, base);
  }
  const double one = RunCodec(config, inputs, pair,
                              OptionsFor(BestCodecIsa(), 1), config.reps);
  PrintRow(pair.Name(), "castserve " + best + ", 1 thr", one, n, bytes, base);
  const double all = RunCodec(config, inputs, pair,
                              OptionsFor(BestCodecIsa(), threads), config.reps);
  PrintRow(pair.Name(),
           "castserve " + best + ", " + std::to_string(threads) + " thr", all,
           n, bytes, base);
}

int Run(int argc, char** argv) {
  Config config;
  if (argc > 1) config.num_elements = std::atoll(argv[1]);
  if (argc > 2) config.reps = std::atoi(argv[2]);
  // Same thread budget for LibTorch and castserve.
  at::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  config.num_rows = std::max<int64_t>(1, config.num_elements / 8192);
  while (config.num_elements % config.num_rows != 0) --config.num_rows;
  std::printf(
      "codec benchmark: %lld elements, best of %d, %u hardware "
      "threads, libtorch intra-op threads %d\n",
      static_cast<long long>(config.num_elements), config.reps,
      std::thread::hardware_concurrency(), at::get_num_threads());
  const Inputs inputs = MakeInputs(config);
  const ElementType f32 = ElementType::kF32, bf16 = ElementType::kBF16;
  const ElementType e4m3 = ElementType::kF8E4M3FN, e5m2 = ElementType::kF8E5M2;
  const Pair pairs[] = {
      {StorageFormat::Plain(bf16), f32, false},
      {StorageFormat::Plain(ElementType::kF16), f32, false},
      {StorageFormat::Plain(bf16), f32, true},
      {StorageFormat::Plain(e4m3), f32, false},
      {StorageFormat::Plain(e4m3), bf16, false},
      {StorageFormat::Plain(e5m2), f32, false},
      {StorageFormat::Plain(e5m2), bf16, false},
      {{e4m3, Scaling::kPerTensor}, f32, false},
      {{e4m3, Scaling::kPerRow}, f32, false},
      {{e4m3, Scaling::kPerRow}, bf16, false},
      {{e5m2, Scaling::kPerRow}, bf16, false},
      {{e4m3, Scaling::kPerRow}, f32, true},
  };
  PrintHeader();
  for (const Pair& pair : pairs) BenchmarkPair(config, inputs, pair);
  return 0;
}

}  // namespace
}  // namespace castserve::casting

int main(int argc, char** argv) { return castserve::casting::Run(argc, argv); }
