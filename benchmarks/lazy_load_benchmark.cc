// Measures one way of loading a Hugging Face checkpoint folder, one process
// per measurement (BENCHMARKS.md, experiments 2 and 4):
//
//   lazy_load_benchmark --model=DIR --mode=MODE [--tokens=16] [--forwards=2]
//       [--json=PATH] [--spawn_time_ns=N] [--prefetch=1] [--buffer_pool=0]
//       [--threads=0] [--codec_threads=0] [--advise_ahead_mb=0]
//
// Modes (compute in f32, or in bf16 with --compute=bf16):
//   eager             read everything at init and upcast it (resident f32);
//   resident_transient read everything at init into its storage format (the
//                     checkpoint's own, e.g. a pre-quantized fp8 one), only
//                     the running module's compute copies live;
//   lazy_cached       mapped, each tensor decoded at first use and kept;
//   mapped_transient  mapped, only the running module's f32 copies live
//                     (casting hooks), from a buffer pool with
//                     --buffer_pool=1;
// and the lazy modes prefetch the next module unless --prefetch=0.
//   decode_only       no model: passes over every tensor that time the
//                     pieces of a lazy forward's weight wait (read, decode,
//                     Weight::Acquire, and two prototypes; RunDecodeOnly).
//
// Init is timed from process start: --spawn_time_ns (CLOCK_REALTIME, taken by
// the driver just before it spawned us) or else /proc/self/stat's start time
// (10 ms resolution). The line "ready ..." is printed and flushed as soon as
// the model is built; "result {json}" comes last and is also written to
// --json. Each forward is split, from hooks on every module with weights,
// into time waiting for weights (acquire: read and decode, or waiting for the
// prefetch), time in those modules' math, and the rest (attention scores,
// residuals). Memory: VmHWM and RssAnon (/proc/self/status), the tracking
// allocator's peak, and bytes read from storage (/proc/self/io read_bytes).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "casting/codec/codec.h"
#include "casting/memory/footprint.h"
#include "casting/memory/tracking_allocator.h"
#include "casting/weight.h"
#include "models/loading/model_loader.h"
#include "models/module.h"

namespace castserve::models {
namespace {

struct Flags {
  std::string model;
  std::string mode;
  std::string json;
  int tokens = 16;
  int forwards = 2;
  int64_t spawn_time_ns = 0;
  bool prefetch = true;
  // LibTorch intra-op threads; 0 = one per hardware thread.
  int threads = 0;
  // Threads one decode may use (CodecOptions::max_threads); 0 = all.
  int codec_threads = 0;
  // WeightPolicyOptions::reuse_transient_buffers (mapped_transient).
  bool buffer_pool = false;
  // Prototype: readahead window, in MiB of checkpoint bytes (0 = off).
  int64_t advise_ahead_mb = 0;
  // The compute dtype: f32 or bf16.
  casting::ElementType compute = casting::ElementType::kF32;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(
        absl::string_view(argv[i]).substr(2), absl::MaxSplits('=', 1));
    bool ok = absl::string_view(argv[i]).substr(0, 2) == "--";
    if (kv.first == "model") {
      flags.model = kv.second;
    } else if (kv.first == "mode") {
      flags.mode = kv.second;
    } else if (kv.first == "json") {
      flags.json = kv.second;
    } else if (kv.first == "tokens") {
      ok = ok && absl::SimpleAtoi(kv.second, &flags.tokens);
    } else if (kv.first == "forwards") {
      ok = ok && absl::SimpleAtoi(kv.second, &flags.forwards);
    } else if (kv.first == "spawn_time_ns") {
      ok = ok && absl::SimpleAtoi(kv.second, &flags.spawn_time_ns);
    } else if (kv.first == "codec_threads") {
      ok = ok && absl::SimpleAtoi(kv.second, &flags.codec_threads);
    } else if (kv.first == "buffer_pool") {
      ok = ok && absl::SimpleAtob(kv.second, &flags.buffer_pool);
    } else if (kv.first == "advise_ahead_mb") {
      ok = ok && absl::SimpleAtoi(kv.second, &flags.advise_ahead_mb);
    } else if (kv.first == "threads") {
      ok = ok && absl::SimpleAtoi(kv.second, &flags.threads);
    } else if (kv.first == "prefetch") {
      ok = ok && absl::SimpleAtob(kv.second, &flags.prefetch);
    } else if (kv.first == "compute") {
      absl::StatusOr<casting::ElementType> compute =
          casting::ParseElementType(kv.second);
      ok = ok && compute.ok() &&
           (*compute == casting::ElementType::kF32 ||
            *compute == casting::ElementType::kBF16);
      if (ok) flags.compute = *compute;
    } else {
      ok = false;
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad ", argv[i]));
  }
  if (flags.model.empty() || flags.mode.empty()) {
    return absl::InvalidArgumentError("--model and --mode are required");
  }
  return flags;
}

int64_t RealtimeNs() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Process start as CLOCK_REALTIME ns: boot time plus /proc/self/stat field 22.
int64_t ProcessStartNs() {
  const std::string stat = ReadText("/proc/self/stat");
  // Fields after the command name "(...)", which may contain spaces.
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  int64_t start_ticks = 0, boot_seconds = 0;
  (void)absl::SimpleAtoi(fields[19], &start_ticks);  // Field 22.
  for (absl::string_view line : absl::StrSplit(ReadText("/proc/stat"), '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      (void)absl::SimpleAtoi(line, &boot_seconds);
    }
  }
  return boot_seconds * 1000000000 +
         start_ticks * (1000000000 / sysconf(_SC_CLK_TCK));
}

// "Key: <number> kB" lines of /proc/self/status, and "key: n" of /proc/self/io.
std::map<std::string, int64_t> ReadCounters(const std::string& path) {
  std::map<std::string, int64_t> counters;
  for (absl::string_view line : absl::StrSplit(ReadText(path), '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    std::vector<absl::string_view> words =
        absl::StrSplit(kv.second, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t value = 0;
    if (words.empty() || !absl::SimpleAtoi(words[0], &value)) continue;
    counters[std::string(kv.first)] =
        words.size() > 1 && words[1] == "kB" ? value * 1024 : value;
  }
  return counters;
}

// The highest RssAnon seen, sampled every millisecond on a background
// thread (the kernel keeps a high-water mark only for the whole RSS, file
// pages of the mapping included).
class RssAnonSampler {
 public:
  RssAnonSampler() : thread_([this] { Loop(); }) {}
  ~RssAnonSampler() {
    stop_ = true;
    thread_.join();
  }
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  void Loop() {
    while (!stop_) {
      peak_bytes_ = std::max<int64_t>(
          peak_bytes_, ReadCounters("/proc/self/status")["RssAnon"]);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_bytes_{0};
  std::thread thread_;
};

// What one phase (init, a forward, a pass) cost.
struct PhaseStats {
  std::string name;
  double seconds = 0;
  // User + system CPU time of all threads: less sensitive than `seconds` to
  // other work sharing the cores.
  double cpu_seconds = 0;
  int64_t read_bytes = 0;          // From storage during the phase.
  int64_t tracked_peak_bytes = 0;  // Tracking allocator, during the phase.
  int64_t rss_anon_bytes = 0;      // At its end.
  double weight_wait_seconds = 0;
  double module_math_seconds = 0;
  int64_t bytes_processed = 0;  // decode_only passes.
  std::string extra;            // More JSON fields, each with a leading ','.

  std::string Json() const {
    return absl::StrCat("{\"name\":\"", name, "\",\"seconds\":", seconds,
                        ",\"cpu_seconds\":", cpu_seconds,
                        ",\"read_bytes\":", read_bytes,
                        ",\"tracked_peak_bytes\":", tracked_peak_bytes,
                        ",\"rss_anon_bytes\":", rss_anon_bytes,
                        ",\"weight_wait_seconds\":", weight_wait_seconds,
                        ",\"module_math_seconds\":", module_math_seconds,
                        ",\"bytes_processed\":", bytes_processed, extra, "}");
  }
};

// Times a phase; Finish fills the common fields.
class PhaseTimer {
 public:
  explicit PhaseTimer(std::string name) {
    stats_.name = std::move(name);
    casting::TrackingAllocator::Installed()->ResetPeak();
    read_bytes_at_start_ = ReadCounters("/proc/self/io")["read_bytes"];
    cpu_at_start_ = CpuSeconds();
    start_ = std::chrono::steady_clock::now();
  }
  PhaseStats Finish() {
    stats_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    stats_.cpu_seconds = CpuSeconds() - cpu_at_start_;
    stats_.read_bytes =
        ReadCounters("/proc/self/io")["read_bytes"] - read_bytes_at_start_;
    stats_.tracked_peak_bytes =
        casting::TrackingAllocator::Installed()->PeakAllocatedBytes();
    stats_.rss_anon_bytes = ReadCounters("/proc/self/status")["RssAnon"];
    return stats_;
  }

 private:
  static double CpuSeconds() {
    rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
           (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  }

  PhaseStats stats_;
  double cpu_at_start_ = 0;
  int64_t read_bytes_at_start_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Splits a forward's time from hooks on every module with weights, attached
// after the casting hooks (so its pre-hook runs after theirs and its
// post-hook before theirs). "Wait" runs from the previous module's end (or
// the forward's start) to the module's weights being ready; "math" from
// there to the module's end. With casting hooks (transient copies, or any
// prefetch) their pre-hook has acquired the weights by then. Without them
// (`acquire_in_hook`), this pre-hook acquires and releases each weight, so
// that the first decode of a cached copy counts as wait, not math. A module
// that reads its own weights (an embedding gathering rows) is never
// acquired here: that would decode its whole table.
class WeightWaitProfiler {
 public:
  WeightWaitProfiler(Module& root, bool acquire_in_hook)
      : acquire_in_hook_(acquire_in_hook) {
    root.Visit([this](Module& module) {
      if (module.weights().empty()) return;
      module.AddPreForwardHook(
          [this](const Module& m, ForwardContext&) { PreForward(m); });
      module.AddPostForwardHook(
          [this](const Module&, ForwardContext&) { PostForward(); });
    });
  }
  void StartForward() {
    last_end_ = Now();
    wait_seconds_ = math_seconds_ = 0;
  }
  double wait_seconds() const { return wait_seconds_; }
  double math_seconds() const { return math_seconds_; }

 private:
  using Clock = std::chrono::steady_clock;
  static Clock::time_point Now() { return Clock::now(); }

  void PreForward(const Module& module) {
    if (acquire_in_hook_ && !module.ReadsOwnWeights()) {
      for (const auto& [name, weight] : module.weights()) {
        AcquireOrThrow(*weight).Reset();
      }
    }
    ready_ = Now();
    wait_seconds_ += std::chrono::duration<double>(ready_ - last_end_).count();
  }
  void PostForward() {
    last_end_ = Now();
    math_seconds_ += std::chrono::duration<double>(last_end_ - ready_).count();
  }

  const bool acquire_in_hook_;
  // One forward at a time in this benchmark: no locking.
  Clock::time_point last_end_, ready_;
  double wait_seconds_ = 0;
  double math_seconds_ = 0;
};

// Prototype of a deeper readahead than the casting hooks' prefetch (which
// hints one module ahead, and nothing on the first forward, whose order it
// is still learning): when a module with weights starts, madvise(WILLNEED)
// the weights of the modules that follow it in tree order, up to `window`
// bytes. Costs no memory beyond the page cache.
class ReadaheadWindow {
 public:
  ReadaheadWindow(Module& root, int64_t window_bytes) {
    root.Visit([this](Module& module) {
      if (!module.weights().empty()) order_.push_back(&module);
    });
    for (size_t i = 0; i < order_.size(); ++i) {
      order_[i]->AddPreForwardHook(
          [this, i, window_bytes](const Module&, ForwardContext&) {
            Advise(i + 1, window_bytes);
          });
    }
  }

 private:
  void Advise(size_t first, int64_t window_bytes) const {
    int64_t advised = 0;
    for (size_t i = first; i < order_.size() && advised < window_bytes; ++i) {
      for (const auto& [name, weight] : order_[i]->weights()) {
        weight->AdviseWillNeed();
        int64_t bytes = 2;  // Upper bound of the mapped bf16 bytes.
        for (int64_t d : weight->shape()) bytes *= d;
        advised += bytes;
      }
    }
  }
  std::vector<Module*> order_;
};

absl::StatusOr<WeightPolicyOptions> PolicyFor(const Flags& flags) {
  WeightPolicyOptions options;
  options.compute_dtype = flags.compute;
  options.codec.max_threads = flags.codec_threads;
  if (flags.mode == "resident_transient") {
    options.residency = casting::Residency::kResident;
    options.compute_copy = casting::ComputeCopyPolicy::kTransient;
    options.eager = true;
    options.prefetch = flags.prefetch;
  } else if (flags.mode == "eager") {
    options.residency = casting::Residency::kResident;
    options.compute_copy = casting::ComputeCopyPolicy::kCached;
    options.eager = true;
  } else if (flags.mode == "lazy_cached") {
    options.residency = casting::Residency::kMapped;
    options.compute_copy = casting::ComputeCopyPolicy::kCached;
    options.prefetch = flags.prefetch;
  } else if (flags.mode == "mapped_transient") {
    options.residency = casting::Residency::kMapped;
    options.compute_copy = casting::ComputeCopyPolicy::kTransient;
    options.prefetch = flags.prefetch;
    options.reuse_transient_buffers = flags.buffer_pool;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --mode=", flags.mode,
                     " (eager, resident_transient, lazy_cached, "
                     "mapped_transient, decode_only)"));
  }
  return options;
}

// Seeded token ids below 32000 (valid for every Llama vocabulary).
NamedTensors MakeInputs(int tokens) {
  at::manual_seed(0);
  return {{"input_ids", at::randint(0, 32000, {1, tokens}, at::kLong)}};
}

absl::StatusOr<PhaseStats> TimedForward(const Model& model,
                                        const NamedTensors& inputs,
                                        WeightWaitProfiler& profiler,
                                        int index) {
  PhaseTimer timer(absl::StrCat("forward", index));
  profiler.StartForward();
  absl::StatusOr<NamedTensors> outputs = model.Forward(inputs);
  if (!outputs.ok()) return outputs.status();
  PhaseStats stats = timer.Finish();
  stats.weight_wait_seconds = profiler.wait_seconds();
  stats.module_math_seconds = profiler.math_seconds();
  const at::Tensor& logits = outputs->at("logits");
  stats.extra = absl::StrCat(
      ",\"logits_finite\":", at::isfinite(logits).all().item<bool>(),
      ",\"logits_sum\":", logits.to(at::kDouble).sum().item<double>());
  return stats;
}

std::string ProcessJson(const RssAnonSampler& sampler) {
  std::map<std::string, int64_t> status = ReadCounters("/proc/self/status");
  std::map<std::string, int64_t> io = ReadCounters("/proc/self/io");
  return absl::StrCat(
      "\"vm_hwm_bytes\":", status["VmHWM"],
      ",\"rss_anon_bytes\":", status["RssAnon"],
      ",\"rss_anon_peak_bytes_sampled\":", sampler.peak_bytes(),
      ",\"rss_file_bytes\":", status["RssFile"],
      ",\"tracked_peak_bytes_process\":",
      casting::TrackingAllocator::Installed()->PeakAllocatedBytes(),
      ",\"read_bytes_total\":", io["read_bytes"],
      ",\"intra_op_threads\":", at::get_num_threads());
}

// Runs a model mode: init, then the forwards. Returns the phases.
absl::StatusOr<std::vector<PhaseStats>> RunModel(const Flags& flags,
                                                 int64_t start_ns) {
  absl::StatusOr<WeightPolicyOptions> options = PolicyFor(flags);
  if (!options.ok()) return options.status();
  PhaseTimer init_timer("init");
  absl::StatusOr<std::unique_ptr<Model>> model =
      LoadHfModel(flags.model, *options);
  if (!model.ok()) return model.status();
  PhaseStats init = init_timer.Finish();
  const double ready_seconds = (RealtimeNs() - start_ns) / 1e9;
  casting::Footprint footprint;
  (*model)->root().Visit([&](Module& module) {
    for (const auto& [name, weight] : module.weights()) {
      footprint += weight->footprint();
    }
  });
  init.extra = absl::StrCat(
      ",\"from_process_start_seconds\":", ready_seconds,
      ",\"resident_weight_bytes\":", footprint.total_resident_bytes(),
      ",\"mapped_weight_bytes\":", footprint.mapped_bytes());
  std::printf("ready %.6f\n", ready_seconds);
  std::fflush(stdout);

  std::unique_ptr<ReadaheadWindow> readahead;
  if (flags.advise_ahead_mb > 0) {
    readahead = std::make_unique<ReadaheadWindow>((*model)->root(),
                                                  flags.advise_ahead_mb << 20);
  }
  // LoadHfModel attaches casting hooks for transient copies or prefetch.
  const bool has_casting_hooks =
      options->prefetch ||
      options->compute_copy == casting::ComputeCopyPolicy::kTransient;
  WeightWaitProfiler profiler((*model)->root(), !has_casting_hooks);
  const NamedTensors inputs = MakeInputs(flags.tokens);
  std::vector<PhaseStats> phases = {init};
  // Init and forwards are not one scope: the whole-process peak is reported
  // on its own.
  for (int i = 1; i <= flags.forwards; ++i) {
    absl::StatusOr<PhaseStats> forward =
        TimedForward(**model, inputs, profiler, i);
    if (!forward.ok()) return forward.status();
    std::printf("forward%d %.6f wait %.3f math %.3f\n", i, forward->seconds,
                forward->weight_wait_seconds, forward->module_math_seconds);
    std::fflush(stdout);
    phases.push_back(*std::move(forward));
  }
  return phases;
}

// Runs `step` on every tensor of `checkpoint` as one timed pass.
absl::StatusOr<PhaseStats> TimePass(
    const std::string& name, const casting::Checkpoint& checkpoint,
    const std::function<absl::Status(const casting::TensorEntry&)>& step) {
  PhaseTimer timer(name);
  uint64_t total = 0;
  for (const casting::TensorEntry& e : checkpoint.tensors()) {
    if (absl::Status status = step(e); !status.ok()) return status;
    total += e.size_bytes;
  }
  PhaseStats stats = timer.Finish();
  stats.bytes_processed = static_cast<int64_t>(total);
  return stats;
}

absl::Status DecodeBf16(const casting::TensorEntry& e, const void* src,
                        void* dst) {
  return casting::Decode(
      casting::StorageFormat::Plain(casting::ElementType::kBF16), src, nullptr,
      e.numel(), e.shape.empty() ? 1 : e.shape[0], casting::ElementType::kF32,
      dst);
}

// decode_only: the pieces a lazy first forward is made of, each as a pass
// over every tensor (all bf16 -> f32):
//   read          copy from the mapping into one reused buffer;
//   decode        decode that buffer into one reused f32 buffer;
//   acquire       Weight::Acquire (mapped, transient) as the model does it:
//                 a new staging buffer, copy, a new f32 tensor, decode;
//   fused_new     prototype: decode straight from the mapping (no staging
//                 copy) into a new f32 tensor;
//   fused_reused  prototype: the same into one reused f32 buffer (what a
//                 buffer pool gives a transient copy).
absl::StatusOr<std::vector<PhaseStats>> RunDecodeOnly(const Flags& flags) {
  absl::StatusOr<std::unique_ptr<casting::Checkpoint>> opened =
      OpenHfCheckpoint(flags.model);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<const casting::Checkpoint> checkpoint = *std::move(opened);
  uint64_t largest = 0;
  for (const casting::TensorEntry& e : checkpoint->tensors()) {
    largest = std::max(largest, e.size_bytes);
  }
  std::vector<uint8_t> source(largest);
  std::vector<float> decoded(largest / 2);
  casting::WeightOptions transient;
  transient.residency = casting::Residency::kMapped;
  transient.compute_copy = casting::ComputeCopyPolicy::kTransient;
  using Entry = casting::TensorEntry;
  const std::vector<
      std::pair<std::string, std::function<absl::Status(const Entry&)>>>
      passes = {
          {"read",
           [&](const Entry& e) {
             return checkpoint->CopyTo(
                 e, absl::MakeSpan(source.data(), e.size_bytes));
           }},
          {"decode",
           [&](const Entry& e) {
             return DecodeBf16(e, source.data(), decoded.data());
           }},
          {"acquire",
           [&](const Entry& e) {
             absl::StatusOr<std::unique_ptr<casting::Weight>> weight =
                 casting::Weight::Create(checkpoint, e.name, transient);
             if (!weight.ok()) return weight.status();
             return (*weight)->Acquire().status();
           }},
          {"fused_new",
           [&](const Entry& e) {
             at::Tensor out = at::empty({e.numel()}, at::kFloat);
             return DecodeBf16(e, checkpoint->Bytes(e).data(), out.data_ptr());
           }},
          {"fused_reused",
           [&](const Entry& e) {
             return DecodeBf16(e, checkpoint->Bytes(e).data(), decoded.data());
           }},
      };
  std::vector<PhaseStats> phases;
  for (const auto& [name, step] : passes) {
    absl::StatusOr<PhaseStats> pass = TimePass(name, *checkpoint, step);
    if (!pass.ok()) return pass.status();
    phases.push_back(*std::move(pass));
  }
  return phases;
}

int Main(int argc, char** argv) {
  const int64_t main_entered_ns = RealtimeNs();
  const int64_t start_ns = ProcessStartNs();
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (!casting::TrackingAllocator::InstallTrackingCpuAllocator().ok()) {
    std::fprintf(stderr, "cannot install the tracking allocator\n");
    return 1;
  }
  at::set_num_threads(
      flags->threads > 0
          ? flags->threads
          : static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t spawn_ns =
      flags->spawn_time_ns > 0 ? flags->spawn_time_ns : start_ns;
  RssAnonSampler sampler;
  absl::StatusOr<std::vector<PhaseStats>> phases =
      flags->mode == "decode_only" ? RunDecodeOnly(*flags)
                                   : RunModel(*flags, spawn_ns);
  if (!phases.ok()) {
    std::fprintf(stderr, "%s\n", phases.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> phase_json;
  for (const PhaseStats& phase : *phases) phase_json.push_back(phase.Json());
  const std::string json = absl::StrCat(
      "{\"model\":\"", flags->model, "\",\"mode\":\"", flags->mode,
      "\",\"prefetch\":", flags->prefetch,
      ",\"advise_ahead_mb\":", flags->advise_ahead_mb,
      ",\"codec_threads\":", flags->codec_threads,
      ",\"tokens\":", flags->tokens,
      ",\"main_entered_seconds\":", (main_entered_ns - spawn_ns) / 1e9,
      ",\"start_from\":\"", flags->spawn_time_ns > 0 ? "driver" : "proc_stat",
      "\",", ProcessJson(sampler), ",\"phases\":[",
      absl::StrJoin(phase_json, ","), "]}");
  std::printf("result %s\n", json.c_str());
  if (!flags->json.empty()) std::ofstream(flags->json) << json << "\n";
  return 0;
}

}  // namespace
}  // namespace castserve::models

int main(int argc, char** argv) { return castserve::models::Main(argc, argv); }
