// Generation throughput of a decoder checkpoint (written for the Llama-1B
// shape of benchmarks/drivers/gen_llama_checkpoint.py), sequential against
// continuous batching, under weight configurations side by side in one
// process and one run.
//
// For each configuration the model is loaded eagerly under its own tracking
// tag, one untimed generation teaches the casting hooks the execution order
// that prefetch follows, and then for each sequence count S (--sequences):
//   - sequential: the S prompts one after the other through Generate;
//   - continuous: the S prompts submitted at once to a GenerationScheduler
//     (a pool holding all of them, max_running = S).
// Every sequence generates --new_tokens tokens greedily (no EOS). Measured:
// tokens/s (S * new_tokens over the wall time of the whole run), time to
// first token (mean over the sequences, from the run's start: the sequential
// run's i-th sequence waits for the ones before it; its first token is
// counted at its Generate's start plus a one-token Generate's time of the
// same prompt, measured before), the tracking allocator's peak of live
// bytes during the run (weights + KV cache + activations + transient
// copies: PeakScope, process-wide) and the process's VmHWM after the run
// (monotonic: the highest so far), and continuous/sequential tokens/s. The
// greedy tokens of both modes are compared ("same" column).
//
// Usage:
//   generation_benchmark --model=DIR [--configs=NAME,...] [--sequences=1,8]
//       [--new_tokens=32] [--prompt_tokens=16] [--block_tokens=16]
//       [--threads=N]
// Config names as layerwise_casting_benchmark's: resident/<dtype> (no
// casting, compute copies kept), cast/<storage>/<compute> (transient compute
// copies, prefetch on), cached/<storage>/<compute> (copies kept after first
// use). Default: resident/F32,cast/BF16/F32,cast/F8_E4M3FN:per_row/F32.
//
// --compare_paths: instead of the above, single-stream decode with and
// without compute from storage (models/kernels/storage_product.h), interleaved
// in one run: the --baseline model (default resident/F32) stays loaded, and for
// each config, --rounds times, in rotating order: the baseline, the config
// with every product on a compute copy (SetStorageProductMaxRows(0): the
// path before compute from storage; "copy"), and the config with decode
// products reading storage ("storage"). Per run: decode tokens/s (the
// new tokens after the first over the time after a one-token Generate of the
// same prompt) and CPU seconds (user + system, all threads) per decoded
// token; the table gives medians over the rounds and whether the greedy
// tokens of both paths are the same.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "casting/casting_policy.h"
#include "casting/codec/storage_format.h"
#include "casting/memory/tracking_allocator.h"
#include "models/generation/generation.h"
#include "models/generation/generation_scheduler.h"
#include "models/kernels/storage_product.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Flags {
  std::string model_dir;
  std::vector<std::string> configs = {"resident/F32", "cast/BF16/F32",
                                      "cast/F8_E4M3FN:per_row/F32"};
  std::vector<int64_t> sequences = {1, 8};
  int64_t new_tokens = 32;
  int64_t prompt_tokens = 16;
  int64_t block_tokens = 16;
  int threads = 0;
  bool compare_paths = false;
  int rounds = 3;
  std::string baseline = "resident/F32";
};

bool ParseList(const std::string& text, std::vector<int64_t>* out) {
  out->clear();
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value <= 0) return false;
    out->push_back(value);
  }
  return !out->empty();
}

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    bool ok = true;
    if (key == "--model") {
      flags.model_dir = value;
    } else if (key == "--configs") {
      flags.configs = absl::StrSplit(value, ',');
    } else if (key == "--sequences") {
      ok = ParseList(value, &flags.sequences);
    } else if (key == "--new_tokens") {
      ok = absl::SimpleAtoi(value, &flags.new_tokens) && flags.new_tokens > 0;
    } else if (key == "--prompt_tokens") {
      ok = absl::SimpleAtoi(value, &flags.prompt_tokens) &&
           flags.prompt_tokens > 0;
    } else if (key == "--block_tokens") {
      ok = absl::SimpleAtoi(value, &flags.block_tokens) &&
           flags.block_tokens > 0;
    } else if (key == "--threads") {
      ok = absl::SimpleAtoi(value, &flags.threads) && flags.threads >= 0;
    } else if (key == "--compare_paths") {
      flags.compare_paths = true;
    } else if (key == "--rounds") {
      ok = absl::SimpleAtoi(value, &flags.rounds) && flags.rounds > 0;
    } else if (key == "--baseline") {
      flags.baseline = value;
    } else {
      ok = false;
    }
    if (!ok) return absl::InvalidArgumentError("bad flag: " + arg);
  }
  if (flags.model_dir.empty()) {
    return absl::InvalidArgumentError("--model=DIR is required");
  }
  return flags;
}

// resident/<dtype>, cast|cached/<storage format>/<compute dtype>.
absl::StatusOr<WeightPolicyOptions> ParseConfig(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '/');
  WeightPolicyOptions options;
  options.eager = true;
  if (parts.size() == 2 && parts[0] == "resident") {
    auto compute = casting::ParseElementType(parts[1]);
    if (!compute.ok()) return compute.status();
    options.compute_dtype = *compute;
    return options;
  }
  if (parts.size() != 3 || (parts[0] != "cast" && parts[0] != "cached")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config '", name,
        "': expected resident/<dtype> or cast|cached/<storage>/<compute>"));
  }
  auto storage = casting::StorageFormat::Parse(parts[1]);
  if (!storage.ok()) return storage.status();
  auto compute = casting::ParseElementType(parts[2]);
  if (!compute.ok()) return compute.status();
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = storage->element;
  policy.scaling = storage->scaling;
  policy.compute_dtype = *compute;
  auto created = casting::CastingPolicy::Create(policy);
  if (!created.ok()) return created.status();
  options.casting = *std::move(created);
  const bool cached = parts[0] == "cached";
  options.compute_copy = cached ? casting::ComputeCopyPolicy::kCached
                                : casting::ComputeCopyPolicy::kTransient;
  options.prefetch = !cached;
  return options;
}

// /proc/self/status's VmHWM in bytes (0 when unreadable).
int64_t VmHwmBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    int64_t kb = 0;
    std::vector<std::string> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() >= 2 && absl::SimpleAtoi(fields[1], &kb)) {
      return kb * 1024;
    }
  }
  return 0;
}

struct RunResult {
  double seconds = 0;
  double ttft_seconds = 0;  // Mean over the sequences.
  int64_t tracked_peak_bytes = 0;
  int64_t vm_hwm_bytes = 0;
  std::vector<std::vector<int64_t>> tokens;  // Per sequence.
};

GenerationOptions Greedy(int64_t new_tokens) {
  GenerationOptions options;
  options.max_new_tokens = new_tokens;
  return options;
}

absl::StatusOr<RunResult> RunSequential(
    const Model& model, const std::vector<std::vector<int64_t>>& prompts,
    int64_t new_tokens) {
  // A one-token Generate of each prompt: its first token's latency alone.
  std::vector<double> first_token;
  for (const auto& prompt : prompts) {
    const absl::Time start = absl::Now();
    auto one = Generate(model, prompt, Greedy(1));
    if (!one.ok()) return one.status();
    first_token.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  RunResult result;
  casting::PeakScope peak;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const double began = absl::ToDoubleSeconds(absl::Now() - start);
    result.ttft_seconds += (began + first_token[i]) / prompts.size();
    auto generated = Generate(model, prompts[i], Greedy(new_tokens));
    if (!generated.ok()) return generated.status();
    result.tokens.push_back(generated->tokens);
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  peak.Stop();
  result.tracked_peak_bytes = peak.peak_bytes();
  result.vm_hwm_bytes = VmHwmBytes();
  return result;
}

absl::StatusOr<RunResult> RunContinuous(
    const Model& model, const std::vector<std::vector<int64_t>>& prompts,
    int64_t new_tokens, int64_t block_tokens) {
  const KvCacheShape shape = model.incremental_decoder()->kv_cache_shape();
  const int64_t tokens = static_cast<int64_t>(prompts[0].size()) + new_tokens;
  const int64_t blocks = (tokens + block_tokens - 1) / block_tokens;
  SchedulerOptions options;
  options.block_tokens = block_tokens;
  options.max_running = static_cast<int64_t>(prompts.size());
  options.pool_bytes = static_cast<int64_t>(prompts.size()) * blocks * 2 *
                       shape.layers * shape.kv_heads * block_tokens *
                       shape.head_dim *
                       static_cast<int64_t>(shape.options.dtype().itemsize());
  auto scheduler = GenerationScheduler::Create(model, options);
  if (!scheduler.ok()) return scheduler.status();
  RunResult result;
  result.tokens.resize(prompts.size());
  std::vector<absl::Status> statuses(prompts.size());
  std::vector<absl::Notification> done(prompts.size());
  absl::Mutex mu;
  double ttft_sum = 0;
  casting::PeakScope peak;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceRequest request;
    request.prompt = prompts[i];
    request.options = Greedy(new_tokens);
    request.on_token = [&, i](int64_t token) {
      if (result.tokens[i].empty()) {
        absl::MutexLock lock(&mu);
        ttft_sum += absl::ToDoubleSeconds(absl::Now() - start);
      }
      result.tokens[i].push_back(token);
      return true;
    };
    request.on_done = [&, i](absl::StatusOr<GenerationResult> outcome) {
      statuses[i] = outcome.status();
      done[i].Notify();
    };
    (*scheduler)->Submit(std::move(request));
  }
  for (absl::Notification& d : done) d.WaitForNotification();
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  peak.Stop();
  for (const absl::Status& status : statuses) {
    if (!status.ok()) return status;
  }
  result.ttft_seconds = ttft_sum / prompts.size();
  result.tracked_peak_bytes = peak.peak_bytes();
  result.vm_hwm_bytes = VmHwmBytes();
  return result;
}

void PrintRow(const std::string& config, size_t sequences, const char* mode,
              const RunResult& run, int64_t new_tokens,
              const std::string& tail) {
  std::printf("%-28s %4zu  %-10s %10.1f %9.1f %11.1f %10.1f  %s\n",
              config.c_str(), sequences, mode,
              sequences * new_tokens / run.seconds, run.ttft_seconds * 1e3,
              run.tracked_peak_bytes / kMiB, run.vm_hwm_bytes / kMiB,
              tail.c_str());
}

// The flags' prompts: seeded ids, the same for every configuration.
std::vector<std::vector<int64_t>> Prompts(int64_t count, int64_t length,
                                          int64_t vocab) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(17);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor ids = at::randint(3, vocab, {length}, generator,
                                 at::TensorOptions(at::kLong));
    prompts.emplace_back(ids.data_ptr<int64_t>(),
                         ids.data_ptr<int64_t>() + length);
  }
  return prompts;
}

struct LoadedModel {
  std::string name;
  std::unique_ptr<Model> model;
};

absl::StatusOr<LoadedModel> LoadConfig(const Flags& flags,
                                       const std::string& name) {
  absl::StatusOr<WeightPolicyOptions> options = ParseConfig(name);
  if (!options.ok()) return options.status();
  if (absl::Status status =
          casting::TrackingAllocator::Installed()->RegisterModel(name);
      !status.ok()) {
    return status;
  }
  casting::ScopedModelTag tag(name);
  absl::StatusOr<std::unique_ptr<Model>> model =
      LoadHfModel(flags.model_dir, *options);
  if (!model.ok()) return model.status();
  if ((*model)->incremental_decoder() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.model_dir, " holds no decoder"));
  }
  return LoadedModel{name, *std::move(model)};
}

absl::Status RunConfig(const Flags& flags, const std::string& name) {
  absl::StatusOr<LoadedModel> loaded = LoadConfig(flags, name);
  if (!loaded.ok()) return loaded.status();
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  casting::ScopedModelTag tag(name);
  std::unique_ptr<Model>& model = loaded->model;
  const IncrementalDecoder* decoder = model->incremental_decoder();
  const int64_t max_sequences =
      *std::max_element(flags.sequences.begin(), flags.sequences.end());
  const auto all =
      Prompts(max_sequences, flags.prompt_tokens, decoder->vocab_size());
  // Untimed: teaches prefetch the module order.
  if (auto warm = Generate(*model, all[0], Greedy(2)); !warm.ok()) {
    return warm.status();
  }
  for (int64_t count : flags.sequences) {
    const std::vector<std::vector<int64_t>> prompts(all.begin(),
                                                    all.begin() + count);
    auto sequential = RunSequential(*model, prompts, flags.new_tokens);
    if (!sequential.ok()) return sequential.status();
    auto continuous =
        RunContinuous(*model, prompts, flags.new_tokens, flags.block_tokens);
    if (!continuous.ok()) return continuous.status();
    PrintRow(name, prompts.size(), "sequential", *sequential, flags.new_tokens,
             "");
    const double ratio = sequential->seconds / continuous->seconds;
    PrintRow(
        name, prompts.size(), "continuous", *continuous, flags.new_tokens,
        absl::StrCat(absl::StrFormat("%.2f", ratio), "  ",
                     continuous->tokens == sequential->tokens ? "yes" : "no"));
  }
  model.reset();
  return allocator->UnregisterModel(name);
}

// User + system CPU seconds of the process so far (every thread).
double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct DecodeRun {
  double tokens_per_second = 0;
  double cpu_seconds_per_token = 0;
  std::vector<int64_t> tokens;
};

// One prompt's decode: a one-token Generate (prefill) then the full one;
// the difference is the decode of new_tokens - 1 tokens.
absl::StatusOr<DecodeRun> RunDecode(const Model& model,
                                    const std::vector<int64_t>& prompt,
                                    int64_t new_tokens, bool read_storage) {
  SetStorageProductMaxRows(read_storage ? kDefaultStorageProductMaxRows : 0);
  const absl::Time start_one = absl::Now();
  const double cpu_one = CpuSeconds();
  if (auto one = Generate(model, prompt, Greedy(1)); !one.ok()) {
    return one.status();
  }
  const double one_seconds = absl::ToDoubleSeconds(absl::Now() - start_one);
  const double one_cpu = CpuSeconds() - cpu_one;
  const absl::Time start = absl::Now();
  const double cpu = CpuSeconds();
  auto generated = Generate(model, prompt, Greedy(new_tokens));
  if (!generated.ok()) return generated.status();
  const double seconds =
      absl::ToDoubleSeconds(absl::Now() - start) - one_seconds;
  const double decoded = static_cast<double>(new_tokens - 1);
  DecodeRun run;
  run.tokens_per_second = decoded / seconds;
  run.cpu_seconds_per_token = (CpuSeconds() - cpu - one_cpu) / decoded;
  run.tokens = generated->tokens;
  SetStorageProductMaxRows(kDefaultStorageProductMaxRows);
  return run;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One row of the --compare_paths table from its rounds.
void PrintPathRow(const std::string& config, const char* path,
                  const std::vector<DecodeRun>& runs, const char* same) {
  std::vector<double> rate, cpu;
  for (const DecodeRun& run : runs) {
    rate.push_back(run.tokens_per_second);
    cpu.push_back(run.cpu_seconds_per_token);
  }
  std::printf("%-28s %-8s %12.2f %12.3f  %s\n", config.c_str(), path,
              Median(rate), Median(cpu), same);
}

absl::Status ComparePaths(const Flags& flags) {
  std::optional<LoadedModel> baseline;
  if (!flags.baseline.empty()) {
    absl::StatusOr<LoadedModel> loaded = LoadConfig(flags, flags.baseline);
    if (!loaded.ok()) return loaded.status();
    baseline = *std::move(loaded);
  }
  std::printf("%-28s %-8s %12s %12s  %s\n", "config", "path", "decode tok/s",
              "cpu s/token", "same tokens");
  for (const std::string& name : flags.configs) {
    absl::StatusOr<LoadedModel> loaded = LoadConfig(flags, name);
    if (!loaded.ok()) return loaded.status();
    const Model& model = *loaded->model;
    const auto prompt = Prompts(1, flags.prompt_tokens,
                                model.incremental_decoder()->vocab_size())[0];
    // Untimed: teaches prefetch the module order.
    if (auto warm = Generate(model, prompt, Greedy(2)); !warm.ok()) {
      return warm.status();
    }
    std::vector<DecodeRun> base_runs, copy_runs, storage_runs;
    for (int round = 0; round < flags.rounds; ++round) {
      for (int slot = 0; slot < 3; ++slot) {
        const int which = (slot + round) % 3;
        if (which == 0 && !baseline.has_value()) continue;
        const Model& run_model = which == 0 ? *baseline->model : model;
        casting::ScopedModelTag tag(which == 0 ? baseline->name : name);
        absl::StatusOr<DecodeRun> run =
            RunDecode(run_model, prompt, flags.new_tokens, which == 2);
        if (!run.ok()) return run.status();
        (which == 0   ? base_runs
         : which == 1 ? copy_runs
                      : storage_runs)
            .push_back(*std::move(run));
      }
    }
    if (baseline.has_value()) {
      PrintPathRow(baseline->name + " (baseline)", "-", base_runs, "");
    }
    PrintPathRow(name, "copy", copy_runs, "");
    PrintPathRow(name, "storage", storage_runs,
                 copy_runs[0].tokens == storage_runs[0].tokens ? "yes" : "no");
    std::fflush(stdout);
    loaded->model.reset();
    if (absl::Status status =
            casting::TrackingAllocator::Installed()->UnregisterModel(name);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (!casting::TrackingAllocator::InstallTrackingCpuAllocator().ok()) {
    std::fprintf(stderr, "cannot install the tracking allocator\n");
    return 1;
  }
  if (flags->threads > 0) at::set_num_threads(flags->threads);
  std::printf("model %s, prompts of %ld tokens, %ld new tokens, %d threads\n",
              flags->model_dir.c_str(), static_cast<long>(flags->prompt_tokens),
              static_cast<long>(flags->new_tokens), at::get_num_threads());
  if (flags->compare_paths) {
    absl::Status status = ComparePaths(*flags);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
      return 1;
    }
    return 0;
  }
  std::printf("%-28s %4s  %-10s %10s %9s %11s %10s  %s\n", "config", "seqs",
              "mode", "tokens/s", "ttft_ms", "tracked_MB", "vmhwm_MB",
              "cont/seq  same");
  for (const std::string& config : flags->configs) {
    absl::Status status = RunConfig(*flags, config);
    if (!status.ok()) {
      std::fprintf(stderr, "%s: %s\n", config.c_str(),
                   std::string(status.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace castserve::models

int main(int argc, char** argv) { return castserve::models::Main(argc, argv); }
