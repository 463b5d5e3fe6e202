#include "server/metrics/serving_metrics.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "casting/memory/footprint.h"

namespace castserve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// The ModelManager's state names (ModelStateName).
constexpr const char* kStates[] = {"UNAVAILABLE", "LOADING", "READY",
                                   "UNLOADING"};

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddValue(MetricFamily& family, Labels labels, double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

void AddHistogram(MetricFamily& family, Labels labels,
                  const BucketCounts& data) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.histogram.sample_count = data.count();
  metric.histogram.sample_sum = data.sum();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < data.counts().size(); ++i) {
    cumulative += data.counts()[i];
    const double bound = i < data.upper_bounds().size()
                             ? data.upper_bounds()[i]
                             : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back({cumulative, bound});
  }
  family.metric.push_back(std::move(metric));
}

Labels With(Labels labels, std::string name, std::string value) {
  labels.push_back({std::move(name), std::move(value)});
  return labels;
}

// The per-model families, filled model by model.
struct ModelFamilies {
  MetricFamily weight_bytes = Family(
      "castserve_model_weight_bytes",
      "Bytes of the model's weights by state (mapped, resident by storage "
      "format, cached_compute, transient_compute).",
      MetricType::Gauge);
  MetricFamily allocated_bytes =
      Family("castserve_model_allocated_bytes",
             "Bytes the tracking allocator attributes to the model now.",
             MetricType::Gauge);
  MetricFamily peak_allocated_bytes = Family(
      "castserve_model_peak_allocated_bytes",
      "Highest bytes the tracking allocator attributed to the model since "
      "it was loaded.",
      MetricType::Gauge);
  MetricFamily batch_peak_bytes =
      Family("castserve_model_batch_peak_bytes",
             "Peak increase of the process's allocated CPU bytes during one "
             "executed batch.",
             MetricType::Histogram);
  MetricFamily success =
      Family("castserve_request_success_total", "Requests that succeeded.",
             MetricType::Counter);
  MetricFamily failure =
      Family("castserve_request_failure_total",
             "Requests that failed, by status code.", MetricType::Counter);
  MetricFamily inference_count =
      Family("castserve_inference_count_total",
             "Items (batch elements) inferred.", MetricType::Counter);
  MetricFamily execution_count =
      Family("castserve_execution_count_total", "Forwards (batches) executed.",
             MetricType::Counter);
  MetricFamily pending =
      Family("castserve_pending_requests", "Requests queued or running now.",
             MetricType::Gauge);
  MetricFamily queue_seconds =
      Family("castserve_queue_duration_seconds",
             "Time requests waited in the queue.", MetricType::Histogram);
  MetricFamily compute_seconds =
      Family("castserve_compute_duration_seconds",
             "Time of the forward each request ran in.", MetricType::Histogram);
  MetricFamily request_seconds =
      Family("castserve_request_duration_seconds",
             "Time from enqueue to completion.", MetricType::Histogram);
  MetricFamily batch_size =
      Family("castserve_batch_size", "Items per executed batch.",
             MetricType::Histogram);
  MetricFamily materializations = Family(
      "castserve_model_materializations_total",
      "Copies of weights made in memory since load, by copy (storage: the "
      "resident copy in the storage format; compute: a decoded compute "
      "copy).",
      MetricType::Counter);
  MetricFamily materialized_bytes =
      Family("castserve_model_materialized_bytes_total",
             "Bytes of the weight copies made since load, by copy.",
             MetricType::Counter);
  MetricFamily materialization_seconds =
      Family("castserve_model_materialization_seconds_total",
             "Time spent reading and converting weight copies since load, by "
             "copy.",
             MetricType::Counter);
  MetricFamily transient_copy_bytes =
      Family("castserve_model_transient_copy_bytes_total",
             "Bytes of transient compute copies made (dropped after each use).",
             MetricType::Counter);
  MetricFamily prefetch_hits = Family(
      "castserve_model_prefetch_hits_total",
      "Modules whose prefetched compute copies were ready when they ran.",
      MetricType::Counter);
  MetricFamily prefetch_misses = Family(
      "castserve_model_prefetch_misses_total",
      "Modules that ran before their prefetch finished.", MetricType::Counter);

  // Generation models only.
  MetricFamily first_response_ms =
      Family("nv_inference_first_response_histogram_ms",
             "Time from a generation request's arrival to its first token, in "
             "milliseconds.",
             MetricType::Histogram);
  MetricFamily inter_token_seconds =
      Family("castserve_generation_inter_token_seconds",
             "Time between consecutive tokens of one sequence.",
             MetricType::Histogram);
  MetricFamily generated_tokens =
      Family("castserve_generation_tokens_total", "Tokens generated.",
             MetricType::Counter);
  MetricFamily kv_cache_bytes = Family(
      "castserve_kv_cache_bytes",
      "Bytes of the KV-cache pool held by sequences now.", MetricType::Gauge);
  MetricFamily kv_cache_peak_bytes =
      Family("castserve_kv_cache_peak_bytes",
             "Most bytes of the KV-cache pool held at once since load.",
             MetricType::Gauge);
  MetricFamily prefix_cache_hits =
      Family("castserve_prefix_cache_hit_tokens_total",
             "Prompt tokens whose keys and values came from cached KV blocks.",
             MetricType::Counter);
  MetricFamily prefix_cache_misses =
      Family("castserve_prefix_cache_miss_tokens_total",
             "Prompt tokens computed because no cached KV block held them.",
             MetricType::Counter);
  MetricFamily prefix_cache_bytes =
      Family("castserve_prefix_cache_bytes",
             "Bytes of the KV-cache pool in cached prefix blocks no sequence "
             "holds now (reusable; evicted when sequences need blocks).",
             MetricType::Gauge);

  void AddGeneration(const Labels& labels, const ServedModelStatistics& stats,
                     const ServedModelActivity::KvCache& kv_cache) {
    AddHistogram(first_response_ms, labels, stats.first_response_ms);
    AddHistogram(inter_token_seconds, labels, stats.inter_token_seconds);
    AddValue(generated_tokens, labels, stats.generated_tokens);
    AddValue(kv_cache_bytes, labels, kv_cache.bytes);
    AddValue(kv_cache_peak_bytes, labels, kv_cache.peak_bytes);
    AddValue(prefix_cache_hits, labels, kv_cache.prefix_hit_tokens);
    AddValue(prefix_cache_misses, labels, kv_cache.prefix_miss_tokens);
    AddValue(prefix_cache_bytes, labels, kv_cache.prefix_cached_bytes);
  }

  // Returns the model's mapped bytes.
  int64_t Add(const Labels& labels, const ServedModel& model) {
    const casting::Footprint footprint = model.footprint();
    AddValue(weight_bytes, With(labels, "state", "mapped"),
             footprint.mapped_bytes());
    for (const auto& [format, bytes] : footprint.resident_bytes_by_format()) {
      AddValue(weight_bytes,
               With(With(labels, "state", "resident"), "format", format),
               bytes);
    }
    AddValue(weight_bytes, With(labels, "state", "cached_compute"),
             footprint.cached_compute_bytes());
    AddValue(weight_bytes, With(labels, "state", "transient_compute"),
             footprint.transient_compute_bytes());
    AddValue(allocated_bytes, labels, model.tracked_bytes());
    const ServedModelStatistics stats = model.statistics();
    AddValue(success, labels, stats.success_count);
    AddValue(inference_count, labels, stats.inference_count);
    AddValue(execution_count, labels, stats.execution_count);
    AddValue(pending, labels, model.pending_requests());
    const ServedModelActivity activity = model.activity();
    AddValue(peak_allocated_bytes, labels, activity.peak_tracked_bytes);
    AddFailures(labels, stats.requests_by_code);
    AddHistogram(batch_peak_bytes, labels, stats.batch_peak_bytes);
    AddHistogram(queue_seconds, labels, stats.queue_seconds);
    AddHistogram(compute_seconds, labels, stats.compute_seconds);
    AddHistogram(request_seconds, labels, stats.request_seconds);
    AddHistogram(batch_size, labels, stats.batch_size);
    AddLazyWork(labels, activity);
    if (activity.kv_cache) AddGeneration(labels, stats, *activity.kv_cache);
    return footprint.mapped_bytes();
  }

  void AddFailures(const Labels& labels, const CountsByCode& requests_by_code) {
    for (int code = 1; code < kStatusCodeCount; ++code) {
      if (requests_by_code[code] == 0) continue;
      AddValue(
          failure,
          With(labels, "reason",
               absl::StatusCodeToString(static_cast<absl::StatusCode>(code))),
          requests_by_code[code]);
    }
  }

  void AddLazyWork(const Labels& labels, const ServedModelActivity& activity) {
    const Labels storage = With(labels, "copy", "storage");
    const Labels compute = With(labels, "copy", "compute");
    AddValue(materializations, storage, activity.storage.materializations);
    AddValue(materializations, compute, activity.compute.materializations);
    AddValue(materialized_bytes, storage, activity.storage.bytes);
    AddValue(materialized_bytes, compute, activity.compute.bytes);
    AddValue(materialization_seconds, storage,
             absl::ToDoubleSeconds(activity.storage.time));
    AddValue(materialization_seconds, compute,
             absl::ToDoubleSeconds(activity.compute.time));
    AddValue(transient_copy_bytes, labels, activity.transient_compute_bytes);
    AddValue(prefetch_hits, labels, activity.prefetch.hits);
    AddValue(prefetch_misses, labels, activity.prefetch.misses);
  }

  // Exported only when a generation model is loaded.
  bool IsGenerationFamily(const MetricFamily& family) const {
    return &family == &first_response_ms || &family == &inter_token_seconds ||
           &family == &generated_tokens || &family == &kv_cache_bytes ||
           &family == &kv_cache_peak_bytes || &family == &prefix_cache_hits ||
           &family == &prefix_cache_misses || &family == &prefix_cache_bytes;
  }

  void MoveTo(std::vector<MetricFamily>& out) {
    for (MetricFamily* family : {&weight_bytes,
                                 &allocated_bytes,
                                 &peak_allocated_bytes,
                                 &batch_peak_bytes,
                                 &success,
                                 &failure,
                                 &inference_count,
                                 &execution_count,
                                 &pending,
                                 &queue_seconds,
                                 &compute_seconds,
                                 &request_seconds,
                                 &batch_size,
                                 &materializations,
                                 &materialized_bytes,
                                 &materialization_seconds,
                                 &transient_copy_bytes,
                                 &prefetch_hits,
                                 &prefetch_misses,
                                 &first_response_ms,
                                 &inter_token_seconds,
                                 &generated_tokens,
                                 &kv_cache_bytes,
                                 &kv_cache_peak_bytes,
                                 &prefix_cache_hits,
                                 &prefix_cache_misses,
                                 &prefix_cache_bytes}) {
      if (family->metric.empty() && IsGenerationFamily(*family)) continue;
      out.push_back(std::move(*family));
    }
  }
};

// castserve_model_tier (READY models only), castserve_tier_moves_total,
// castserve_wake_seconds and castserve_wake_rate_bytes_per_second.
void CollectTiers(const LifecycleMetrics& lifecycle,
                  const std::set<std::string>& ready,
                  std::vector<MetricFamily>& out) {
  MetricFamily tier =
      Family("castserve_model_tier",
             "The READY model's memory tier: 0 hot, 1 warm, 2 cool.",
             MetricType::Gauge);
  MetricFamily moves =
      Family("castserve_tier_moves_total",
             "Moves of the model between memory tiers, by cause (pressure, "
             "keep_alive, api, request: a promotion).",
             MetricType::Counter);
  MetricFamily wake_rate = Family(
      "castserve_wake_rate_bytes_per_second",
      "Bytes per second at which the model's promotions from a tier built it "
      "back to hot (a moving average); under pressure the memory budget "
      "demotes first what wakes fastest for its idle time.",
      MetricType::Gauge);
  for (const auto& [model, entry] : lifecycle.snapshot()) {
    if (ready.count(model) > 0) AddValue(tier, {{"model", model}}, entry.tier);
    for (const auto& [from, rate] : entry.wake_rates) {
      AddValue(wake_rate, {{"model", model}, {"from", from}}, rate);
    }
    for (const auto& [key, count] : entry.tier_moves) {
      const auto& [from, to, cause] = key;
      AddValue(moves,
               {{"model", model}, {"from", from}, {"to", to}, {"cause", cause}},
               static_cast<double>(count));
    }
  }
  MetricFamily wake = Family(
      "castserve_wake_seconds",
      "Time from a request's arrival to its model being ready to run, for "
      "requests that found their model demoted, by the tier they found.",
      MetricType::Histogram);
  for (const auto& [found, seconds] : lifecycle.wake_seconds()) {
    AddHistogram(wake, {{"tier", found}}, seconds);
  }
  out.push_back(std::move(tier));
  out.push_back(std::move(moves));
  out.push_back(std::move(wake));
  out.push_back(std::move(wake_rate));
}

}  // namespace

// ---------------------------------------------------------------------------
// ServingMetrics

ServingMetrics::ServingMetrics(ServingMetricsOptions options)
    : options_(std::move(options)) {}

std::vector<MetricFamily> ServingMetrics::Collect() const {
  std::vector<MetricFamily> out;
  std::map<std::string, std::string> versions;
  std::set<std::string> ready;
  if (options_.model_states) {
    MetricFamily state =
        Family("castserve_model_state",
               "1 for the model's current lifecycle state, 0 for the others.",
               MetricType::Gauge);
    for (const ModelStateSample& sample : options_.model_states()) {
      versions[sample.name] = sample.version;
      if (sample.state == std::string("READY")) ready.insert(sample.name);
      const Labels labels = {{"model", sample.name},
                             {"version", sample.version}};
      for (const char* name : kStates) {
        AddValue(state, With(labels, "state", name),
                 sample.state == name ? 1 : 0);
      }
    }
    out.push_back(std::move(state));
  }
  auto labels_of = [&versions](const std::string& model) -> Labels {
    auto it = versions.find(model);
    return {{"model", model},
            {"version", it == versions.end() ? "1" : it->second}};
  };

  if (options_.lifecycle != nullptr) {
    MetricFamily load = Family("castserve_model_load_duration_seconds",
                               "Duration of the model's last successful load.",
                               MetricType::Gauge);
    MetricFamily evictions =
        Family("castserve_model_evictions_total",
               "Unloads of the model to stay within the memory budget.",
               MetricType::Counter);
    for (const auto& [model, entry] : options_.lifecycle->snapshot()) {
      if (entry.loaded) {
        AddValue(load, labels_of(model), entry.last_load_seconds);
      }
      AddValue(evictions, labels_of(model), entry.evictions);
    }
    out.push_back(std::move(load));
    out.push_back(std::move(evictions));
    CollectTiers(*options_.lifecycle, ready, out);
  }

  MetricFamily mapped = Family(
      "castserve_mapped_checkpoint_bytes",
      "Checkpoint bytes the loaded models still read through the mapping "
      "(page cache).",
      MetricType::Gauge);
  int64_t mapped_bytes = 0;
  ModelFamilies models;
  if (options_.ready_models) {
    for (const auto& [name, model] : options_.ready_models()) {
      mapped_bytes += models.Add(labels_of(name), *model);
    }
  }
  if (options_.unrouted != nullptr) {
    models.AddFailures({}, options_.unrouted->snapshot());
  }
  AddValue(mapped, {}, mapped_bytes);
  out.push_back(std::move(mapped));
  models.MoveTo(out);

  if (!options_.devices.empty()) {
    MetricFamily allocated =
        Family("castserve_device_allocated_bytes",
               "Bytes allocated on the device now (cpu: the tracking "
               "allocator; cuda:N: LibTorch's caching allocator).",
               MetricType::Gauge);
    MetricFamily peak =
        Family("castserve_device_peak_allocated_bytes",
               "Highest bytes allocated on the device since start.",
               MetricType::Gauge);
    for (const casting::DeviceMemoryStats* stats : options_.devices) {
      const Labels device = {{"device", stats->DeviceName()}};
      AddValue(allocated, device, stats->AllocatedBytes());
      AddValue(peak, device, stats->PeakAllocatedBytes());
    }
    out.push_back(std::move(allocated));
    out.push_back(std::move(peak));
  }
  MetricFamily budget = Family(
      "castserve_memory_budget_bytes",
      "The server's memory budget (--memory-budget-bytes); 0 means none.",
      MetricType::Gauge);
  AddValue(budget, {}, options_.memory_budget_bytes);
  out.push_back(std::move(budget));
  return out;
}

}  // namespace castserve
