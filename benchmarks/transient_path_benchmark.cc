// Side-by-side measurements of the transient-copy path's optimisations
// (BENCHMARKS.md, "What was optimised"), on any Hugging Face folder whose
// inputs are token ids or pixel values:
//
//   transient_path_benchmark --model=DIR [--runs=5] [--tokens=16]
//       [--image=0] [--json=PATH]
//
// Steady state, mapped weights with transient f32 (or the checkpoint's
// compute dtype) copies, one model per variant, forwards interleaved across
// variants run by run:
//   plain       no prefetch, every copy a new allocation;
//   prefetch    the next module decoded while the current one runs;
//   pool        prefetch + BufferPool (weights.reuse_transient_buffers).
// First forward of a freshly loaded lazy (mapped, cached) model, a new model
// per run: `cached` (no hooks) against `cached+prefetch` (the hooks follow
// the tree's order on that first forward).
//
// Prints the median and min-max of each, the ratios of the medians, and the
// tracking allocator's peak increase per forward. A benchmark: it measures,
// it never fails on a time.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "casting/memory/malloc_settings.h"
#include "casting/memory/tracking_allocator.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

struct Flags {
  std::string model;
  std::string json;
  int runs = 5;
  int tokens = 16;
  int image = 0;  // Pixel height/width for vision models; 0: from signature.
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    std::pair<std::string, std::string> kv = absl::StrSplit(
        arg.substr(arg.find_first_not_of('-')), absl::MaxSplits('=', 1));
    bool ok = true;
    if (kv.first == "model") {
      flags.model = kv.second;
    } else if (kv.first == "json") {
      flags.json = kv.second;
    } else if (kv.first == "runs") {
      ok = absl::SimpleAtoi(kv.second, &flags.runs) && flags.runs > 0;
    } else if (kv.first == "tokens") {
      ok = absl::SimpleAtoi(kv.second, &flags.tokens) && flags.tokens > 0;
    } else if (kv.first == "image") {
      ok = absl::SimpleAtoi(kv.second, &flags.image) && flags.image >= 0;
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("bad flag: ", arg));
    }
  }
  if (flags.model.empty()) return absl::InvalidArgumentError("--model needed");
  return flags;
}

// One batch-1 input per signature entry: token ids 1..100 (valid in any
// vocabulary), masks of ones, zeros for token types, seeded pixels.
NamedTensors MakeInputs(const Model& model, const Flags& flags) {
  NamedTensors inputs;
  at::manual_seed(0);
  for (const TensorSpec& spec : model.inputs()) {
    if (spec.optional && spec.name != "attention_mask") continue;
    std::vector<int64_t> shape = spec.shape;
    shape[0] = 1;
    for (size_t i = 1; i < shape.size(); ++i) {
      if (shape[i] < 0) {
        shape[i] =
            shape.size() == 4 && flags.image > 0 ? flags.image : flags.tokens;
      }
    }
    if (spec.dtype == at::kLong || spec.dtype == at::kInt) {
      at::Tensor values = spec.name == "attention_mask"
                              ? at::ones(shape, at::kLong)
                          : spec.name == "token_type_ids"
                              ? at::zeros(shape, at::kLong)
                              : at::randint(1, 100, shape, at::kLong);
      inputs[spec.name] = values.to(spec.dtype);
    } else {
      inputs[spec.name] = at::randn(shape).to(spec.dtype);
    }
  }
  return inputs;
}

struct Sample {
  double seconds;
  int64_t peak_increase_bytes;
};

absl::StatusOr<Sample> TimedForward(const Model& model,
                                    const NamedTensors& inputs) {
  casting::PeakScope scope;
  const absl::Time start = absl::Now();
  absl::StatusOr<NamedTensors> outputs = model.Forward(inputs);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  scope.Stop();
  if (!outputs.ok()) return outputs.status();
  return Sample{seconds, scope.peak_increase_bytes()};
}

WeightPolicyOptions Transient(bool prefetch, bool pool) {
  WeightPolicyOptions options;
  options.residency = casting::Residency::kMapped;
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  options.prefetch = prefetch;
  options.reuse_transient_buffers = pool;
  return options;
}

WeightPolicyOptions LazyCached(bool prefetch) {
  WeightPolicyOptions options;
  options.residency = casting::Residency::kMapped;
  options.compute_copy = casting::ComputeCopyPolicy::kCached;
  options.prefetch = prefetch;
  return options;
}

struct Series {
  std::string name;
  std::vector<Sample> samples;

  double Median() const { return Quantile(0.5); }
  double Min() const { return Quantile(0); }
  double Max() const { return Quantile(1); }
  double Quantile(double q) const {
    std::vector<double> seconds;
    for (const Sample& s : samples) seconds.push_back(s.seconds);
    std::sort(seconds.begin(), seconds.end());
    return seconds[static_cast<size_t>(q * (seconds.size() - 1) + 0.5)];
  }
  int64_t MaxPeak() const {
    int64_t peak = 0;
    for (const Sample& s : samples) {
      peak = std::max(peak, s.peak_increase_bytes);
    }
    return peak;
  }
};

// Steady-state forwards of the transient variants, interleaved.
absl::StatusOr<std::vector<Series>> MeasureSteadyState(const Flags& flags) {
  const std::vector<std::pair<std::string, WeightPolicyOptions>> variants = {
      {"plain", Transient(false, false)},
      {"prefetch", Transient(true, false)},
      {"pool", Transient(true, true)}};
  std::vector<std::unique_ptr<Model>> models;
  std::vector<Series> series;
  for (const auto& [name, options] : variants) {
    absl::StatusOr<std::unique_ptr<Model>> model =
        LoadHfModel(flags.model, options);
    if (!model.ok()) return model.status();
    models.push_back(*std::move(model));
    series.push_back({name, {}});
  }
  const NamedTensors inputs = MakeInputs(*models[0], flags);
  for (auto& model : models) {  // Two warm-up forwards: order, pool.
    for (int i = 0; i < 2; ++i) {
      if (absl::StatusOr<Sample> s = TimedForward(*model, inputs); !s.ok()) {
        return s.status();
      }
    }
  }
  for (int run = 0; run < flags.runs; ++run) {
    for (size_t v = 0; v < models.size(); ++v) {
      absl::StatusOr<Sample> sample = TimedForward(*models[v], inputs);
      if (!sample.ok()) return sample.status();
      series[v].samples.push_back(*sample);
    }
  }
  return series;
}

// First forwards of freshly loaded lazy models, interleaved.
absl::StatusOr<std::vector<Series>> MeasureFirstForward(const Flags& flags) {
  std::vector<Series> series = {{"cached", {}}, {"cached+prefetch", {}}};
  for (int run = 0; run < flags.runs; ++run) {
    for (size_t v = 0; v < series.size(); ++v) {
      absl::StatusOr<std::unique_ptr<Model>> model =
          LoadHfModel(flags.model, LazyCached(v == 1));
      if (!model.ok()) return model.status();
      absl::StatusOr<Sample> sample =
          TimedForward(**model, MakeInputs(**model, flags));
      if (!sample.ok()) return sample.status();
      series[v].samples.push_back(*sample);
    }
  }
  return series;
}

std::string Report(const std::string& title, const std::vector<Series>& all) {
  std::string text = absl::StrCat("## ", title,
                                  "\n\n| variant | median s | "
                                  "min-max s | vs first | peak increase MB |"
                                  "\n|---|---|---|---|---|\n");
  for (const Series& s : all) {
    absl::StrAppendFormat(&text, "| %s | %.3f | %.3f-%.3f | %.3fx | %.1f |\n",
                          s.name, s.Median(), s.Min(), s.Max(),
                          s.Median() / all[0].Median(), s.MaxPeak() / 1e6);
  }
  return text;
}

std::string Json(const std::string& key, const std::vector<Series>& all) {
  std::string json = absl::StrCat("\"", key, "\": {");
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<std::string> seconds;
    for (const Sample& s : all[i].samples) {
      seconds.push_back(absl::StrFormat("%.4f", s.seconds));
    }
    absl::StrAppendFormat(
        &json, "%s\"%s\": {\"seconds\": [%s], \"peak_increase_bytes\": %d}",
        i == 0 ? "" : ", ", all[i].name, absl::StrJoin(seconds, ", "),
        all[i].MaxPeak());
  }
  return json + "}";
}

int Run(int argc, char** argv) {
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  // The daemon's allocator setting, so forwards fault in the same pages.
  casting::UseServingMallocSettings();
  if (!casting::TrackingAllocator::InstallTrackingCpuAllocator().ok()) {
    std::fprintf(stderr, "cannot install the tracking allocator\n");
    return 1;
  }
  absl::StatusOr<std::vector<Series>> steady = MeasureSteadyState(*flags);
  absl::StatusOr<std::vector<Series>> first =
      steady.ok() ? MeasureFirstForward(*flags) : steady;
  if (!first.ok()) {
    std::fprintf(stderr, "%s\n", first.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n%s",
              Report("Steady-state forward, transient", *steady).c_str(),
              Report("First forward of a lazy model", *first).c_str());
  if (!flags->json.empty()) {
    std::ofstream(flags->json)
        << "{\"model\": \"" << flags->model << "\", \"runs\": " << flags->runs
        << ", " << Json("steady_state", *steady) << ", "
        << Json("first_forward", *first) << "}\n";
  }
  return 0;
}

}  // namespace
}  // namespace castserve::models

int main(int argc, char** argv) { return castserve::models::Run(argc, argv); }
