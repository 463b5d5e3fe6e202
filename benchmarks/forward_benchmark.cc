// In-process forward latency of a BERT-family checkpoint folder (resident,
// eager, f32), without the server around it: the number the serving
// overhead is measured against, and the program to profile a forward with
// (perf record -e cpu-clock).
//
//   bazel run -c opt //benchmarks:forward_benchmark -- --model=DIR
//       [--batch=1] [--seq=128] [--runs=50] [--threads=1]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "models/loading/model_loader.h"

namespace castserve {
namespace {

struct Flags {
  std::string model;
  int64_t batch = 1, seq = 128;
  int runs = 50, threads = 1;
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
  std::vector<double> ms;
  for (int i = 0; i < flags.runs + 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto outputs = (*model)->Forward(inputs);
    const double elapsed = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    if (!outputs.ok()) {
      std::fprintf(stderr, "%s\n", outputs.status().ToString().c_str());
      return 1;
    }
    if (i >= 3) ms.push_back(elapsed);  // 3 warm-ups
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s batch %ld seq %ld, %d threads: median %.2f ms, min %.2f ms\n",
              flags.model.c_str(), static_cast<long>(flags.batch),
              static_cast<long>(flags.seq), at::get_num_threads(),
              ms[ms.size() / 2], ms.front());
  return 0;
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  castserve::Flags flags;
  if (!castserve::Parse(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: forward_benchmark --model=DIR [--batch=N] [--seq=N] "
                 "[--runs=N] [--threads=N]\n");
    return 2;
  }
  return castserve::Run(flags);
}
