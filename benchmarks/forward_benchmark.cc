// In-process forward latency of a BERT-family checkpoint folder (resident,
// eager, f32), without the server around it: the number the serving
// overhead is measured against, and the program to profile a forward with
// (perf record -e cpu-clock).
//
//   bazel run -c opt //benchmarks:forward_benchmark -- --model=DIR
//       [--batch=1] [--seq=128] [--runs=50] [--threads=1] [--compare-packed]
//
// --compare-packed alternates forwards with the packed BERT layers
// (models/encoders/packed_bert_layer.h) and without, in one process, and
// prints both and their largest output difference.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "models/encoders/packed_bert_layer.h"
#include "models/loading/model_loader.h"

namespace castserve {
namespace {

struct Flags {
  std::string model;
  int64_t batch = 1, seq = 128;
  int runs = 50, threads = 1;
  bool compare_packed = false;
};

bool Parse(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("model")) {
      flags->model = v;
    } else if (const char* v = value("batch")) {
      flags->batch = std::atoll(v);
    } else if (const char* v = value("seq")) {
      flags->seq = std::atoll(v);
    } else if (const char* v = value("runs")) {
      flags->runs = std::atoi(v);
    } else if (const char* v = value("threads")) {
      flags->threads = std::atoi(v);
    } else if (arg == "--compare-packed") {
      flags->compare_packed = true;
    } else {
      return false;
    }
  }
  return !flags->model.empty();
}

int Run(const Flags& flags) {
  at::set_num_threads(flags.threads);
  models::WeightPolicyOptions options;
  options.eager = true;
  auto model = models::LoadHfModel(flags.model, options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  at::manual_seed(0);
  models::NamedTensors inputs = {
      {"input_ids", at::randint(1000, 30000, {flags.batch, flags.seq})},
      {"attention_mask", at::ones({flags.batch, flags.seq}, at::kLong)},
      {"token_type_ids", at::zeros({flags.batch, flags.seq}, at::kLong)}};
  // Per path (packed, unfused) the times after 3 warm-ups each; one path
  // alone unless --compare-packed.
  std::vector<double> ms[2];
  models::NamedTensors last[2];
  const int paths = flags.compare_packed ? 2 : 1;
  for (int i = 0; i < paths * (flags.runs + 3); ++i) {
    const int path = i % paths;
    if (flags.compare_packed) models::SetPackedEncoderLayers(path == 0);
    const auto start = std::chrono::steady_clock::now();
    auto outputs = (*model)->Forward(inputs);
    const double elapsed = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    if (!outputs.ok()) {
      std::fprintf(stderr, "%s\n", outputs.status().ToString().c_str());
      return 1;
    }
    if (i >= paths * 3) ms[path].push_back(elapsed);
    last[path] = *std::move(outputs);
  }
  const char* names[2] = {flags.compare_packed ? "packed" : "default",
                          "unfused"};
  for (int path = 0; path < paths; ++path) {
    std::sort(ms[path].begin(), ms[path].end());
    std::printf(
        "%s batch %ld seq %ld, %d threads, %s: median %.2f ms, min %.2f ms\n",
        flags.model.c_str(), static_cast<long>(flags.batch),
        static_cast<long>(flags.seq), at::get_num_threads(), names[path],
        ms[path][ms[path].size() / 2], ms[path].front());
  }
  if (flags.compare_packed) {
    for (const auto& [name, tensor] : last[0]) {
      std::printf("  %s: max |packed - unfused| %.3g\n", name.c_str(),
                  (tensor - last[1].at(name)).abs().max().item<double>());
    }
  }
  return 0;
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  castserve::Flags flags;
  if (!castserve::Parse(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: forward_benchmark --model=DIR [--batch=N] [--seq=N] "
                 "[--runs=N] [--threads=N] [--compare-packed]\n");
    return 2;
  }
  return castserve::Run(flags);
}
