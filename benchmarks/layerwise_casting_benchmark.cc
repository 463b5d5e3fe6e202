// Experiment 1 of BENCHMARKS.md: layerwise casting on a vision tower
// (written for the SigLIP-so400m-shaped checkpoint of
// benchmarks/drivers/gen_siglip_so400m.py), side by side with the same model
// kept resident in fp32 and in bf16, all in one process and one run.
//
// Every weight configuration's model is loaded eagerly (every resident copy
// made at load) and stays loaded; two batch-1 forwards of each run untimed
// (the first teaches the casting hooks the execution order that prefetch
// follows, see LoadConfig).
// Then for each batch size: `--warmup` untimed forwards of each
// configuration, and `--runs` rounds that each time every configuration once
// (interleaved, so that load from other processes on a shared machine
// spreads over all of them). Measured:
//   - footprint: the weights' own bytes (casting::Footprint, resident plus
//     cached compute copies) after load, beside the ideal: each weight's
//     numel times the bytes per element of the format the casting policy
//     gives it (plus fp8 scales), or of the compute dtype for kept weights;
//   - peak: what the model holds between forwards (tracking allocator's
//     live bytes across its load and first two forwards: weights, reusable
//     buffers, prefetched copies) plus the input, plus the allocator's peak
//     increase during the forward (PeakScope): weights + input +
//     activations + transient copies, the quantity published as "peak
//     inference memory"; the largest over the runs. A check reports how far
//     the process's live bytes stray from the sum of what the models hold;
//   - latency: median and min-max of the timed forwards;
//   - error: relative L2 error of pooler_output against the fp32 resident
//     configuration's on the same input, when that configuration ran first.
// Sizes print in MB of 2^20 bytes, as the published figures are.
//
// Usage:
//   layerwise_casting_benchmark --model=DIR [--batches=1,4,16]
//       [--configs=all|NAME,...] [--runs=5|BATCH:N,...] [--warmup=1|...]
//       [--threads=N] [--reuse_transient_buffers=true|false] [--json=PATH]
//       [--profile] [--device=cpu|cuda:N]
// Config names: resident/F32, resident/BF16 (no casting), and
// cast/<storage>/<compute>, e.g. cast/F8_E5M2/BF16, cast/F8_E4M3FN:per_row/F32
// (transient compute copies, prefetch on, buffer reuse as the flag says);
// cached/<storage>/<compute> keeps each compute copy after its first use
// (the peer benchmark's bf16 configuration is cached/BF16/BF16);
// host/<storage>/<compute> is cast/ with the storage in pinned host memory,
// streamed to the device per layer (RESIDENCY_HOST; the same as cast/ on
// the CPU).
// --runs and --warmup take one count for every batch or BATCH:COUNT pairs
// (batches not listed use 1 run / 0 warm-ups). --threads sets LibTorch's
// intra-op threads (default: its own default, which the daemon also keeps).
// --profile prints time per module kind for the timed forwards.
// --device=cuda:N places every configuration on that GPU (a build with
// --config=cuda): bytes are then the device's caching allocator's (allocated
// bytes of live tensors), the peak its peak since a reset before each timed
// forward (the input's device copy is made during the forward and counts
// there); exit status 3 when the device is not available ("no CUDA device").
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "casting/casting_policy.h"
#include "casting/codec/storage_format.h"
#include "casting/device/device.h"
#include "casting/device/device_probe.h"
#include "casting/memory/device_memory.h"
#include "casting/memory/footprint.h"
#include "casting/memory/malloc_settings.h"
#include "casting/memory/tracking_allocator.h"
#include "models/loading/model_loader.h"
#include "models/loading/weight_factory.h"
#include "models/model.h"
#include "models/module_profiler.h"

namespace castserve::models {
namespace {

using casting::ElementType;
using casting::StorageFormat;

constexpr double kMiB = 1024.0 * 1024.0;

// Targets of the issue (BENCHMARKS.md, Experiment 1).
constexpr double kFootprintTolerance = 0.01;
constexpr double kPeakRatioTarget = 0.6;
constexpr double kLatencyRatioTarget = 1.10;

struct Flags {
  std::string model_dir;
  std::vector<int64_t> batches = {1, 4, 16};
  std::vector<std::string> configs;  // Empty: all.
  std::map<int64_t, int> runs;       // By batch; default 1.
  std::map<int64_t, int> warmup;     // By batch; default 0.
  std::string json_path;
  bool profile = false;
  int threads = 0;  // 0: LibTorch's default, as the daemon runs.
  // WeightPolicyOptions::reuse_transient_buffers of the cast configurations.
  bool reuse_transient_buffers = false;
  int default_runs = 1;
  int default_warmup = 0;
  casting::Device device;
  // The device's memory counters, set by Main (not owned): the tracking
  // allocator on the CPU, the caching allocator on CUDA.
  casting::DeviceMemoryStats* memory = nullptr;
};

// One weight configuration.
struct BenchConfig {
  std::string name;
  WeightPolicyOptions options;
};

absl::StatusOr<BenchConfig> ParseConfig(const std::string& name,
                                        const Flags& flags) {
  std::vector<std::string> parts = absl::StrSplit(name, '/');
  BenchConfig config{name, {}};
  config.options.eager = true;
  config.options.device = flags.device;
  if (parts.size() == 2 && parts[0] == "resident") {
    auto compute = casting::ParseElementType(parts[1]);
    if (!compute.ok()) return compute.status();
    config.options.compute_dtype = *compute;
    return config;
  }
  if (parts.size() != 3 ||
      (parts[0] != "cast" && parts[0] != "cached" && parts[0] != "host")) {
    return absl::InvalidArgumentError(
        absl::StrCat("config '", name,
                     "': expected resident/<dtype> or "
                     "cast|cached|host/<storage format>/<compute dtype>"));
  }
  auto storage = StorageFormat::Parse(parts[1]);
  if (!storage.ok()) return storage.status();
  auto compute = casting::ParseElementType(parts[2]);
  if (!compute.ok()) return compute.status();
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = storage->element;
  policy.scaling = storage->scaling;
  policy.compute_dtype = *compute;
  auto created = casting::CastingPolicy::Create(policy);
  if (!created.ok()) return created.status();
  config.options.casting = *std::move(created);
  if (parts[0] == "cached") {
    config.options.compute_copy = casting::ComputeCopyPolicy::kCached;
    return config;
  }
  config.options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  config.options.storage_on_host = parts[0] == "host";
  config.options.prefetch = true;
  config.options.reuse_transient_buffers = flags.reuse_transient_buffers;
  return config;
}

std::vector<std::string> AllConfigNames() {
  std::vector<std::string> names = {"resident/F32", "resident/BF16"};
  for (const char* storage :
       {"F8_E5M2", "F8_E4M3FN", "F8_E5M2:per_tensor", "F8_E4M3FN:per_tensor",
        "F8_E5M2:per_row", "F8_E4M3FN:per_row", "BF16"}) {
    for (const char* compute : {"BF16", "F32"}) {
      names.push_back(absl::StrCat("cast/", storage, "/", compute));
    }
  }
  return names;
}

// "5" (every batch) or "1:5,16:2" (by batch).
bool ParseCounts(const std::string& text, int* default_count,
                 std::map<int64_t, int>* by_batch) {
  if (absl::SimpleAtoi(text, default_count)) return *default_count >= 0;
  for (absl::string_view pair : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(pair, ':');
    int64_t batch = 0;
    int count = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &batch) ||
        !absl::SimpleAtoi(kv[1], &count) || count < 0) {
      return false;
    }
    (*by_batch)[batch] = count;
  }
  return true;
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
    } else if (key == "--batches") {
      flags.batches.clear();
      for (absl::string_view b : absl::StrSplit(value, ',')) {
        int64_t batch = 0;
        ok = ok && absl::SimpleAtoi(b, &batch) && batch > 0;
        flags.batches.push_back(batch);
      }
    } else if (key == "--configs") {
      if (value != "all") flags.configs = absl::StrSplit(value, ',');
    } else if (key == "--runs") {
      ok = ParseCounts(value, &flags.default_runs, &flags.runs);
    } else if (key == "--warmup") {
      ok = ParseCounts(value, &flags.default_warmup, &flags.warmup);
    } else if (key == "--json") {
      flags.json_path = value;
    } else if (key == "--threads") {
      ok = absl::SimpleAtoi(value, &flags.threads) && flags.threads >= 0;
    } else if (key == "--reuse_transient_buffers") {
      ok = value == "true" || value == "false";
      flags.reuse_transient_buffers = value == "true";
    } else if (key == "--profile") {
      flags.profile = true;
    } else if (key == "--device") {
      absl::StatusOr<casting::Device> device = casting::Device::Parse(value);
      ok = device.ok();
      if (ok) flags.device = *device;
    } else {
      ok = false;
    }
    if (!ok) return absl::InvalidArgumentError("bad flag: " + arg);
  }
  if (flags.model_dir.empty()) {
    return absl::InvalidArgumentError("--model=DIR is required");
  }
  if (flags.configs.empty()) flags.configs = AllConfigNames();
  return flags;
}

int CountFor(const std::map<int64_t, int>& by_batch, int64_t batch,
             int fallback) {
  auto it = by_batch.find(batch);
  return it == by_batch.end() ? fallback : it->second;
}

// ---- Footprint and its ideal ----------------------------------------------

casting::Footprint WeightsFootprint(Model& model) {
  casting::Footprint total;
  model.root().Visit([&](Module& module) {
    for (const auto& [local_name, weight] : module.weights()) {
      total += weight->footprint();
    }
  });
  return total;
}

// What the weights must occupy under `options`: each in the format the
// policy gives its module (plus scales), kept ones in the compute dtype.
int64_t IdealStorageBytes(Model& model, const WeightPolicyOptions& options) {
  int64_t total = 0;
  model.root().Visit([&](Module& module) {
    const StorageFormat format =
        WeightOptionsFor(options, module.name(), module.kind()).storage;
    for (const auto& [local_name, weight] : module.weights()) {
      total += format.TotalBytes(weight->shape()).value();
    }
  });
  return total;
}

// ---- Timed forwards ---------------------------------------------------------

struct BatchResult {
  int64_t batch = 0;
  int runs = 0;
  std::vector<double> seconds;        // One per timed run, sorted.
  int64_t peak_bytes = 0;             // Largest over the runs (RunTimed).
  int64_t peak_increase_bytes = 0;    // Largest over the runs, above the start.
  int64_t max_unaccounted_bytes = 0;  // Largest |unaccounted| (RunTimed).
  std::optional<double> pooler_rel_error;         // Against resident/F32.
  std::map<std::string, double> seconds_by_kind;  // --profile, per forward.

  double median_seconds() const {
    const size_t n = seconds.size();
    return n % 2 == 1 ? seconds[n / 2]
                      : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  }
};

struct ConfigResult {
  std::string name;
  std::string compute_dtype;
  double load_seconds = 0;
  casting::Footprint footprint;
  int64_t ideal_bytes = 0;
  // Compute copies still alive between the first and second forward.
  int64_t transient_after_first_forward_bytes = 0;
  // What the model holds between forwards, by the tracking allocator: its
  // weights plus anything kept for reuse (buffer pools, prefetched copies),
  // measured across load and two forwards.
  int64_t held_bytes = 0;
  std::vector<BatchResult> batches;

  double footprint_error() const {
    return static_cast<double>(footprint.owned_bytes() - ideal_bytes) /
           ideal_bytes;
  }
  const BatchResult* Batch(int64_t batch) const {
    for (const BatchResult& result : batches) {
      if (result.batch == batch) return &result;
    }
    return nullptr;
  }
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

at::Tensor MakeInput(const Model& model, int64_t batch) {
  std::vector<int64_t> shape = model.inputs().at(0).shape;
  shape[0] = batch;
  at::manual_seed(batch);  // The same images for every configuration.
  return at::randn(shape);
}

NamedTensors ForwardOrDie(const Model& model, const at::Tensor& pixels) {
  absl::StatusOr<NamedTensors> outputs =
      model.Forward({{model.inputs().at(0).name, pixels}});
  if (!outputs.ok()) {
    std::fprintf(stderr, "forward failed: %s\n",
                 outputs.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(outputs);
}

double RelativeError(const at::Tensor& value, const at::Tensor& reference) {
  return (value - reference).norm().item<double>() /
         reference.norm().item<double>();
}

// Leaf-ish totals per module kind over the profiler's calls, per forward.
std::map<std::string, double> SecondsByKind(const ModuleProfiler& profiler,
                                            int forwards) {
  std::map<std::string, double> by_kind;
  for (const auto& [name, profile] : profiler.profiles()) {
    by_kind[profile.kind] +=
        absl::ToDoubleSeconds(profile.total_time) / std::max(forwards, 1);
  }
  return by_kind;
}

// One timed forward. Its peak is what the model held before it (its
// ConfigResult::held_bytes, plus the input) plus the tracking allocator's peak
// increase during it, so that other loaded configurations do not count.
struct TimedForward {
  double seconds = 0;
  int64_t peak_bytes = 0;
  int64_t peak_increase_bytes = 0;
  // Process-wide live bytes before the forward minus every loaded model's
  // held bytes and the input: ~0 when the accounting above is complete.
  int64_t unaccounted_bytes = 0;
  NamedTensors outputs;
};

TimedForward RunTimed(const Model& model, int64_t held_bytes,
                      int64_t all_models_held_bytes, const at::Tensor& pixels,
                      casting::DeviceMemoryStats& memory) {
  const bool on_cpu = memory.DeviceName() == "cpu";
  // On CUDA the host input is not device memory: its device copy is made
  // during the forward and counts in the increase.
  const int64_t input_bytes =
      on_cpu ? static_cast<int64_t>(pixels.nbytes()) : 0;
  TimedForward timed;
  const int64_t live_before = memory.AllocatedBytes();
  timed.unaccounted_bytes = live_before - all_models_held_bytes - input_bytes;
  if (!on_cpu) memory.ResetPeak();
  casting::PeakScope scope;
  const auto start = std::chrono::steady_clock::now();
  // Outputs come back to the host: the time includes the device's work.
  timed.outputs = ForwardOrDie(model, pixels);
  timed.seconds = SecondsSince(start);
  scope.Stop();
  timed.peak_increase_bytes = on_cpu
                                  ? scope.peak_increase_bytes()
                                  : memory.PeakAllocatedBytes() - live_before;
  timed.peak_bytes = held_bytes + input_bytes + timed.peak_increase_bytes;
  return timed;
}

// A configuration's model, loaded for the whole run, and its results.
struct LoadedConfig {
  ConfigResult result;
  std::unique_ptr<Model> model;
};

LoadedConfig LoadConfig(const BenchConfig& config, const Flags& flags) {
  LoadedConfig loaded;
  loaded.result.name = config.name;
  loaded.result.compute_dtype = std::string(
      casting::ElementTypeName(EffectiveComputeDtype(config.options)));
  const int64_t live_before_load = flags.memory->AllocatedBytes();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Model>> model =
      LoadHfModel(flags.model_dir, config.options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: load failed: %s\n", config.name.c_str(),
                 model.status().ToString().c_str());
    std::exit(1);
  }
  loaded.model = *std::move(model);
  loaded.result.load_seconds = SecondsSince(start);
  loaded.result.footprint = WeightsFootprint(*loaded.model);
  loaded.result.ideal_bytes = IdealStorageBytes(*loaded.model, config.options);
  // Untimed. The first forward teaches the casting hooks the execution
  // order prefetch follows; until then they follow the tree's order, which
  // differs where a layer runs its children out of registration order, and
  // the copies prefetched for modules that already ran stay until the next
  // forward claims them: measured here, then the second forward clears them.
  {
    const at::Tensor pixels = MakeInput(*loaded.model, 1);
    ForwardOrDie(*loaded.model, pixels);
    loaded.result.transient_after_first_forward_bytes =
        WeightsFootprint(*loaded.model).transient_compute_bytes();
    ForwardOrDie(*loaded.model, pixels);
  }
  loaded.result.held_bytes = flags.memory->AllocatedBytes() - live_before_load;
  std::fprintf(stderr, "loaded %s in %.2f s\n", config.name.c_str(),
               loaded.result.load_seconds);
  return loaded;
}

// Runs `batch` on every configuration, interleaved: round r runs each
// configuration once, so that load from other processes on this shared
// machine spreads over all configurations instead of hitting one.
// `reference_pooler` receives resident/F32's pooler_output for the error
// column.
void RunBatch(std::vector<LoadedConfig>& configs, int64_t batch,
              const Flags& flags,
              std::map<int64_t, at::Tensor>* reference_pooler) {
  const at::Tensor pixels = MakeInput(*configs.front().model, batch);
  const int warmup = CountFor(flags.warmup, batch, flags.default_warmup);
  const int runs = std::max(1, CountFor(flags.runs, batch, flags.default_runs));
  std::vector<std::unique_ptr<ModuleProfiler>> profilers;
  int64_t all_models_held_bytes = 0;
  for (LoadedConfig& config : configs) {
    all_models_held_bytes += config.result.held_bytes;
    for (int i = 0; i < warmup; ++i) ForwardOrDie(*config.model, pixels);
    if (flags.profile) {
      profilers.push_back(ModuleProfiler::Attach(config.model->root()));
    }
    config.result.batches.push_back({batch, runs});
  }
  for (int round = 0; round < runs; ++round) {
    for (LoadedConfig& config : configs) {
      TimedForward timed =
          RunTimed(*config.model, config.result.held_bytes,
                   all_models_held_bytes, pixels, *flags.memory);
      BatchResult& result = config.result.batches.back();
      result.seconds.push_back(timed.seconds);
      result.peak_bytes = std::max(result.peak_bytes, timed.peak_bytes);
      result.peak_increase_bytes =
          std::max(result.peak_increase_bytes, timed.peak_increase_bytes);
      result.max_unaccounted_bytes = std::max(
          result.max_unaccounted_bytes, std::abs(timed.unaccounted_bytes));
      std::fprintf(stderr, "batch %lld round %d %s: %.3f s\n",
                   static_cast<long long>(batch), round,
                   config.result.name.c_str(), timed.seconds);
      if (round > 0) continue;
      const at::Tensor& pooler = timed.outputs.at("pooler_output");
      if (config.result.name == "resident/F32") {
        (*reference_pooler)[batch] = pooler.clone();
      } else if (reference_pooler->count(batch) > 0) {
        result.pooler_rel_error =
            RelativeError(pooler, reference_pooler->at(batch));
      }
    }
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    BatchResult& result = configs[i].result.batches.back();
    std::sort(result.seconds.begin(), result.seconds.end());
    if (flags.profile) {
      result.seconds_by_kind = SecondsByKind(*profilers[i], runs);
    }
  }
}

void PrintBatchRow(const ConfigResult& config, const BatchResult& batch) {
  std::printf("%-30s %5lld %9.2f %9.2f %9.2f %10.3f %8.3f-%-8.3f %9s\n",
              config.name.c_str(), static_cast<long long>(batch.batch),
              config.footprint.owned_bytes() / kMiB, config.ideal_bytes / kMiB,
              batch.peak_bytes / kMiB, batch.median_seconds(),
              batch.seconds.front(), batch.seconds.back(),
              batch.pooler_rel_error.has_value()
                  ? absl::StrFormat("%.2e", *batch.pooler_rel_error).c_str()
                  : "-");
  for (const auto& [kind, seconds] : batch.seconds_by_kind) {
    std::printf("    %-40s %9.3f s/forward\n", kind.c_str(), seconds);
  }
}

// ---- Targets and output -----------------------------------------------------

const ConfigResult* FindResident(const std::vector<ConfigResult>& results,
                                 const std::string& compute_dtype) {
  for (const ConfigResult& result : results) {
    if (result.name == "resident/" + compute_dtype) return &result;
  }
  return nullptr;
}

struct Target {
  std::string config;
  std::string what;
  double value = 0;
  double limit = 0;
  bool met = false;
};

std::vector<Target> EvaluateTargets(const std::vector<ConfigResult>& results) {
  std::vector<Target> targets;
  const ConfigResult* fp32 = FindResident(results, "F32");
  const BatchResult* fp32_b1 = fp32 != nullptr ? fp32->Batch(1) : nullptr;
  for (const ConfigResult& result : results) {
    const double error = std::abs(result.footprint_error());
    targets.push_back({result.name, "|footprint/ideal - 1|", error,
                       kFootprintTolerance, error <= kFootprintTolerance});
    if (result.name.rfind("cast/", 0) != 0) continue;
    const BatchResult* b1 = result.Batch(1);
    if (fp32_b1 != nullptr && b1 != nullptr) {
      const double ratio =
          static_cast<double>(b1->peak_bytes) / fp32_b1->peak_bytes;
      targets.push_back({result.name, "peak b1 / resident/F32 peak b1", ratio,
                         kPeakRatioTarget, ratio <= kPeakRatioTarget});
    }
    const ConfigResult* same = FindResident(results, result.compute_dtype);
    const BatchResult* b16 = result.Batch(16);
    const BatchResult* same_b16 = same != nullptr ? same->Batch(16) : nullptr;
    if (b16 != nullptr && same_b16 != nullptr) {
      const double ratio = b16->median_seconds() / same_b16->median_seconds();
      targets.push_back(
          {result.name, "latency b16 / resident/" + result.compute_dtype, ratio,
           kLatencyRatioTarget, ratio <= kLatencyRatioTarget});
    }
  }
  return targets;
}

void PrintTargets(const std::vector<Target>& targets) {
  std::printf("\n%-30s %-36s %9s %7s %s\n", "config", "target", "value",
              "limit", "met");
  for (const Target& t : targets) {
    std::printf("%-30s %-36s %9.4f %7.2f %s\n", t.config.c_str(),
                t.what.c_str(), t.value, t.limit, t.met ? "yes" : "NO");
  }
}

std::string BatchJson(const BatchResult& b) {
  std::vector<std::string> seconds;
  for (double s : b.seconds) seconds.push_back(absl::StrFormat("%.4f", s));
  std::vector<std::string> kinds;
  for (const auto& [kind, s] : b.seconds_by_kind) {
    kinds.push_back(absl::StrFormat("\"%s\": %.4f", kind, s));
  }
  return absl::StrFormat(
      "{\"batch\": %d, \"runs\": %d, \"latency_median_s\": %.4f, "
      "\"latency_min_s\": %.4f, \"latency_max_s\": %.4f, \"latency_s\": "
      "[%s], \"peak_mb\": %.2f, \"peak_increase_mb\": %.2f, "
      "\"max_unaccounted_mb\": %.3f, "
      "\"pooler_rel_error_vs_f32\": %s, \"profile_s_by_kind\": {%s}}",
      b.batch, b.runs, b.median_seconds(), b.seconds.front(), b.seconds.back(),
      absl::StrJoin(seconds, ", "), b.peak_bytes / kMiB,
      b.peak_increase_bytes / kMiB, b.max_unaccounted_bytes / kMiB,
      b.pooler_rel_error.has_value()
          ? absl::StrFormat("%.4e", *b.pooler_rel_error)
          : "null",
      absl::StrJoin(kinds, ", "));
}

std::string ConfigJson(const ConfigResult& r) {
  std::vector<std::string> batches;
  for (const BatchResult& b : r.batches) batches.push_back(BatchJson(b));
  std::vector<std::string> formats;
  for (const auto& [format, bytes] : r.footprint.resident_bytes_by_format()) {
    formats.push_back(absl::StrFormat("\"%s\": %.2f", format, bytes / kMiB));
  }
  return absl::StrFormat(
      "    {\"config\": \"%s\", \"compute_dtype\": \"%s\", \"load_s\": %.3f, "
      "\"footprint_mb\": %.2f, \"ideal_mb\": %.2f, \"footprint_error\": %.6f, "
      "\"resident_mb_by_format\": {%s}, \"cached_compute_mb\": %.2f, "
      "\"transient_after_first_forward_mb\": %.2f, \"held_mb\": %.2f,\n"
      "     \"batches\": [\n       %s]}",
      r.name, r.compute_dtype, r.load_seconds, r.footprint.owned_bytes() / kMiB,
      r.ideal_bytes / kMiB, r.footprint_error(), absl::StrJoin(formats, ", "),
      r.footprint.cached_compute_bytes() / kMiB,
      r.transient_after_first_forward_bytes / kMiB, r.held_bytes / kMiB,
      absl::StrJoin(batches, ",\n       "));
}

void WriteJson(const std::string& path, const Flags& flags,
               const std::vector<ConfigResult>& results,
               const std::vector<Target>& targets) {
  std::vector<std::string> configs;
  for (const ConfigResult& r : results) configs.push_back(ConfigJson(r));
  std::vector<std::string> target_json;
  for (const Target& t : targets) {
    target_json.push_back(absl::StrFormat(
        "    {\"config\": \"%s\", \"target\": \"%s\", \"value\": %.4f, "
        "\"limit\": %.2f, \"met\": %s}",
        t.config, t.what, t.value, t.limit, t.met ? "true" : "false"));
  }
  std::ofstream out(path);
  out << absl::StrFormat(
      "{\n  \"benchmark\": \"layerwise_casting_benchmark\",\n"
      "  \"model\": \"%s\",\n  \"device\": \"%s\",\n"
      "  \"intra_op_threads\": %d,\n"
      "  \"reuse_transient_buffers\": %s,\n"
      "  \"units\": \"MB = 2^20 bytes, seconds\",\n"
      "  \"results\": [\n%s\n  ],\n  \"targets\": [\n%s\n  ]\n}\n",
      flags.model_dir, flags.device.name(), at::get_num_threads(),
      flags.reuse_transient_buffers ? "true" : "false",
      absl::StrJoin(configs, ",\n"), absl::StrJoin(target_json, ",\n"));
  if (!out) std::fprintf(stderr, "could not write %s\n", path.c_str());
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\nusage: see the top of %s\n",
                 flags.status().ToString().c_str(), __FILE__);
    return 2;
  }
  if (absl::Status available = casting::CheckDeviceAvailable(flags->device);
      !available.ok()) {
    std::fprintf(stderr, "%s\n", available.ToString().c_str());
    return 3;
  }
  std::vector<BenchConfig> configs;
  for (const std::string& name : flags->configs) {
    absl::StatusOr<BenchConfig> config = ParseConfig(name, *flags);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      return 2;
    }
    configs.push_back(*std::move(config));
  }
  if (flags->threads > 0) at::set_num_threads(flags->threads);
  // The daemon's allocator setting, so forwards fault in the same pages.
  casting::UseServingMallocSettings();
  absl::StatusOr<casting::TrackingAllocator*> tracking =
      casting::TrackingAllocator::InstallTrackingCpuAllocator();
  if (!tracking.ok()) {
    std::fprintf(stderr, "could not install the tracking allocator\n");
    return 1;
  }
  std::vector<std::unique_ptr<casting::DeviceMemoryStats>> cuda_memory =
      casting::NewCudaDeviceMemoryStats();
  flags->memory = flags->device.is_cpu()
                      ? static_cast<casting::DeviceMemoryStats*>(*tracking)
                      : cuda_memory.at(flags->device.index()).get();
  std::printf("model %s, %d intra-op threads; MB = 2^20 bytes\n",
              flags->model_dir.c_str(), at::get_num_threads());
  std::printf("%-30s %5s %9s %9s %9s %10s %17s %9s\n", "config", "batch",
              "foot MB", "ideal MB", "peak MB", "median s", "min-max s",
              "pool err");
  std::vector<LoadedConfig> loaded;
  for (const BenchConfig& config : configs) {
    loaded.push_back(LoadConfig(config, *flags));
  }
  std::map<int64_t, at::Tensor> reference_pooler;
  for (int64_t batch : flags->batches) {
    RunBatch(loaded, batch, *flags, &reference_pooler);
  }
  std::vector<ConfigResult> results;
  for (LoadedConfig& config : loaded) {
    for (const BatchResult& batch : config.result.batches) {
      PrintBatchRow(config.result, batch);
    }
    results.push_back(std::move(config.result));
  }
  const std::vector<Target> targets = EvaluateTargets(results);
  PrintTargets(targets);
  if (!flags->json_path.empty()) {
    WriteJson(flags->json_path, *flags, results, targets);
  }
  return 0;
}

}  // namespace
}  // namespace castserve::models

int main(int argc, char** argv) { return castserve::models::Main(argc, argv); }
