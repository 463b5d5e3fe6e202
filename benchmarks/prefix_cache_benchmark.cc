// Time to first token with and without automatic prefix caching: a shared
// system prompt of `--prefix` tokens, then `--requests` requests each with
// its own `--suffix` tokens after it, through a GenerationScheduler (blocks
// of 16, the pool large enough for all), each round once with prefix
// caching and once without, interleaved, every scheduler starting cold:
//
//   sequential  one request at a time (each submitted when the last
//               ended): the first computes the system prompt, the others
//               reuse it when the cache is on
//   burst       all at once (max_running 8): the first wave computes it in
//               one step; later waves reuse it
//
// Prints the mean and median time to first token (submit to first token)
// of each mode and the ratio.
//
//   python3 benchmarks/drivers/gen_llama_checkpoint.py --shape small
//       --out /tmp/castserve-bench/llama-small
//   bazel build -c opt //benchmarks:prefix_cache_benchmark
//   bazel-bin/benchmarks/prefix_cache_benchmark
//       --model=/tmp/castserve-bench/llama-small [--threads=1] [--rounds=2]
//       [--requests=32] [--prefix=512] [--suffix=16]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "casting/memory/tracking_allocator.h"
#include "models/generation/generation.h"
#include "models/generation/generation_scheduler.h"
#include "models/loading/model_loader.h"

namespace castserve {
namespace {

struct Flags {
  std::string model;
  int threads = 1;
  int rounds = 2;
  int64_t requests = 32;
  int64_t prefix = 512;
  int64_t suffix = 16;
};

// One request's first token, timed from its submission.
struct Pending {
  absl::Time submitted;
  absl::Duration first_token;
  absl::Notification done;
  bool ok = false;
};

std::vector<int64_t> PromptOf(const Flags& flags, int64_t request,
                              int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < flags.prefix; ++i) ids.push_back((7 * i + 3) % vocab);
  for (int64_t i = 0; i < flags.suffix; ++i) {
    ids.push_back((1000 + 31 * request + 13 * i) % vocab);
  }
  return ids;
}

std::shared_ptr<Pending> Submit(models::GenerationScheduler& scheduler,
                                const models::Model& model,
                                const std::vector<int64_t>& prompt) {
  auto pending = std::make_shared<Pending>();
  models::GenerationOptions options;
  options.max_new_tokens = 1;
  auto checked = models::CheckGenerationRequest(model, prompt, options);
  if (!checked.ok()) {
    std::fprintf(stderr, "%s\n", checked.status().ToString().c_str());
    std::exit(1);
  }
  models::SequenceRequest request(*std::move(checked));
  request.on_token = [pending](int64_t) {
    pending->first_token = absl::Now() - pending->submitted;
    return true;
  };
  request.on_done = [pending](absl::StatusOr<models::GenerationResult> r) {
    pending->ok = r.ok();
    if (!r.ok()) std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    pending->done.Notify();
  };
  pending->submitted = absl::Now();
  scheduler.Submit(std::move(request));
  return pending;
}

// Times to first token in ms, one per request.
std::vector<double> RunMode(const Flags& flags, const models::Model& model,
                            bool prefix_caching, bool burst) {
  models::SchedulerOptions options;
  options.pool_bytes = int64_t{2} << 30;
  options.block_tokens = 16;
  options.prefix_caching = prefix_caching;
  auto scheduler = models::GenerationScheduler::Create(model, options);
  if (!scheduler.ok()) {
    std::fprintf(stderr, "%s\n", scheduler.status().ToString().c_str());
    std::exit(1);
  }
  const int64_t vocab = model.incremental_decoder()->vocab_size();
  std::vector<std::shared_ptr<Pending>> all;
  for (int64_t r = 0; r < flags.requests; ++r) {
    all.push_back(Submit(**scheduler, model, PromptOf(flags, r, vocab)));
    if (!burst) all.back()->done.WaitForNotification();
  }
  std::vector<double> ms;
  for (const auto& p : all) {
    p->done.WaitForNotification();
    if (!p->ok) std::exit(1);
    ms.push_back(absl::ToDoubleMilliseconds(p->first_token));
  }
  const models::SchedulerStats stats = (*scheduler)->stats();
  std::printf("    (%s %s: hit tokens %lld, miss tokens %lld)\n",
              burst ? "burst" : "sequential", prefix_caching ? "on" : "off",
              static_cast<long long>(stats.prefix_cache_hit_tokens),
              static_cast<long long>(stats.prefix_cache_miss_tokens));
  return ms;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / v.size();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(const Flags& flags) {
  if (!casting::TrackingAllocator::InstallTrackingCpuAllocator().ok()) {
    std::fprintf(stderr, "cannot install the tracking allocator\n");
    return 1;
  }
  at::set_num_threads(flags.threads);
  auto model = models::LoadHfModel(flags.model, {});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "time to first token: %lld requests, a shared %lld-token prefix + "
      "%lld own tokens, 1 new token, blocks of 16, %d thread(s); ms\n",
      static_cast<long long>(flags.requests),
      static_cast<long long>(flags.prefix),
      static_cast<long long>(flags.suffix), flags.threads);
  for (int round = 0; round < flags.rounds; ++round) {
    for (bool burst : {false, true}) {
      const std::vector<double> off = RunMode(flags, **model, false, burst);
      const std::vector<double> on = RunMode(flags, **model, true, burst);
      std::printf(
          "round %d %-10s | off: mean %8.1f median %8.1f | on: mean %8.1f "
          "median %8.1f | off/on mean %6.2fx median %6.2fx\n",
          round, burst ? "burst" : "sequential", Mean(off), Median(off),
          Mean(on), Median(on), Mean(off) / Mean(on), Median(off) / Median(on));
    }
  }
  return 0;
}

bool ParseFlag(const char* arg, const char* name, int64_t* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  *value = std::atoll(arg + n);
  return true;
}

}  // namespace
}  // namespace castserve

int main(int argc, char** argv) {
  castserve::Flags flags;
  for (int i = 1; i < argc; ++i) {
    int64_t value = 0;
    if (std::strncmp(argv[i], "--model=", 8) == 0) {
      flags.model = argv[i] + 8;
    } else if (castserve::ParseFlag(argv[i], "--threads=", &value)) {
      flags.threads = static_cast<int>(value);
    } else if (castserve::ParseFlag(argv[i], "--rounds=", &value)) {
      flags.rounds = static_cast<int>(value);
    } else if (castserve::ParseFlag(argv[i], "--requests=", &value)) {
      flags.requests = value;
    } else if (castserve::ParseFlag(argv[i], "--prefix=", &value)) {
      flags.prefix = value;
    } else if (castserve::ParseFlag(argv[i], "--suffix=", &value)) {
      flags.suffix = value;
    } else {
      std::fprintf(stderr, "unknown flag %s (see the header comment)\n",
                   argv[i]);
      return 2;
    }
  }
  if (flags.model.empty() || flags.threads < 1 || flags.rounds < 1 ||
      flags.requests < 1 || flags.prefix < 0 || flags.suffix < 1) {
    std::fprintf(stderr,
                 "--model is required; counts must be >= 1 (prefix >= 0)\n");
    return 2;
  }
  return castserve::Run(flags);
}
