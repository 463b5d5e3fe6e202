#include "server/metrics/serving_metrics.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "casting/codec/storage_format.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "casting/memory/footprint.h"
#include "casting/memory/tracking_allocator.h"
#include "casting/weight.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "server/lifecycle/model_manager.h"
#include "server/metrics/metrics_exporter.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/generation/generation_served_model.h"
#include "server/test_util/fake_generation_engine.h"

namespace castserve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using ::testing::HasSubstr;
using LabelMap = std::map<std::string, std::string>;

// The metric of family `name` whose labels include `labels`, or nullptr.
const ClientMetric* Find(const std::vector<MetricFamily>& families,
                         const std::string& name, const LabelMap& labels) {
  for (const MetricFamily& family : families) {
    if (family.name != name) continue;
    for (const ClientMetric& metric : family.metric) {
      int matched = 0;
      for (const ClientMetric::Label& label : metric.label) {
        auto it = labels.find(label.name);
        if (it != labels.end() && it->second == label.value) ++matched;
      }
      if (matched == static_cast<int>(labels.size())) return &metric;
    }
  }
  return nullptr;
}

// Fixed answers for the collectable's per-model reads.
class FakeServedModel final : public ServedModel {
 public:
  casting::Footprint footprint_value;
  ServedModelStatistics stats;
  int64_t pending = 0;
  int64_t tracked = 0;

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override { return specs_; }
  const std::vector<TensorSpec>& outputs() const override { return specs_; }
  void Infer(InferenceCall, std::function<void(absl::Status)>) override {}
  int64_t pending_requests() const override { return pending; }
  ServedModelStatistics statistics() const override { return stats; }
  casting::Footprint footprint() const override { return footprint_value; }
  int64_t tracked_bytes() const override { return tracked; }
  ServedModelActivity activity() const override { return activity_value; }
  ServedModelActivity activity_value;

 private:
  inference::ModelConfig config_;
  std::vector<TensorSpec> specs_;
};

class FakeDeviceStats final : public casting::DeviceMemoryStats {
 public:
  FakeDeviceStats(std::string name, int64_t allocated_bytes)
      : name_(std::move(name)), allocated_bytes_(allocated_bytes) {}
  int64_t AllocatedBytes() const override { return allocated_bytes_; }
  int64_t PeakAllocatedBytes() const override { return 5 * allocated_bytes_; }
  void ResetPeak() override {}
  std::string DeviceName() const override { return name_; }

 private:
  const std::string name_;
  const int64_t allocated_bytes_;
};

TEST(ServingMetricsTest, ExportsStatesFootprintLifecycleAndDevice) {
  auto model = std::make_shared<FakeServedModel>();
  model->footprint_value.AddMapped(100);
  model->footprint_value.AddResident("f8_e4m3fn:per_row", 40);
  model->footprint_value.AddResident("f32", 8);
  model->footprint_value.AddCachedCompute(16);
  model->stats.success_count = 7;
  model->stats.inference_count = 9;
  model->stats.execution_count = 4;
  model->pending = 2;
  model->tracked = 77;
  LifecycleMetrics lifecycle;
  lifecycle.RecordLoad("a", absl::Milliseconds(1500));
  lifecycle.RecordEviction("b");
  lifecycle.RecordEviction("b");
  FakeDeviceStats cpu("cpu", 1000);
  FakeDeviceStats gpu("cuda:0", 3000);

  ServingMetricsOptions options;
  options.model_states = [] {
    return std::vector<ModelStateSample>{{"a", "1", "READY"},
                                         {"b", "1", "UNAVAILABLE"}};
  };
  options.ready_models = [model] {
    return std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>{
        {"a", model}};
  };
  options.lifecycle = &lifecycle;
  options.devices = {&cpu, &gpu};
  options.memory_budget_bytes = 123456;
  const std::vector<MetricFamily> families =
      ServingMetrics(std::move(options)).Collect();

  auto value = [&](const std::string& name, const LabelMap& labels) {
    const ClientMetric* metric = Find(families, name, labels);
    EXPECT_NE(metric, nullptr) << name;
    return metric == nullptr ? -1.0
                             : metric->gauge.value + metric->counter.value;
  };
  EXPECT_EQ(
      value("castserve_model_state", {{"model", "a"}, {"state", "READY"}}), 1);
  EXPECT_EQ(
      value("castserve_model_state", {{"model", "a"}, {"state", "LOADING"}}),
      0);
  EXPECT_EQ(value("castserve_model_state",
                  {{"model", "b"}, {"state", "UNAVAILABLE"}}),
            1);
  EXPECT_EQ(value("castserve_model_weight_bytes",
                  {{"model", "a"}, {"state", "mapped"}}),
            100);
  EXPECT_EQ(
      value("castserve_model_weight_bytes", {{"model", "a"},
                                             {"state", "resident"},
                                             {"format", "f8_e4m3fn:per_row"}}),
      40);
  EXPECT_EQ(value("castserve_model_weight_bytes",
                  {{"model", "a"}, {"state", "resident"}, {"format", "f32"}}),
            8);
  EXPECT_EQ(value("castserve_model_weight_bytes",
                  {{"model", "a"}, {"state", "cached_compute"}}),
            16);
  // Only resident storage carries a format.
  const ClientMetric* mapped =
      Find(families, "castserve_model_weight_bytes", {{"state", "mapped"}});
  ASSERT_NE(mapped, nullptr);
  EXPECT_EQ(mapped->label.size(), 3u);
  EXPECT_EQ(value("castserve_mapped_checkpoint_bytes", {}), 100);
  EXPECT_EQ(value("castserve_model_allocated_bytes", {{"model", "a"}}), 77);
  EXPECT_EQ(value("castserve_request_success_total", {{"model", "a"}}), 7);
  EXPECT_EQ(value("castserve_inference_count_total", {{"model", "a"}}), 9);
  EXPECT_EQ(value("castserve_execution_count_total", {{"model", "a"}}), 4);
  EXPECT_EQ(value("castserve_pending_requests", {{"model", "a"}}), 2);
  EXPECT_EQ(value("castserve_model_load_duration_seconds", {{"model", "a"}}),
            1.5);
  EXPECT_EQ(value("castserve_model_evictions_total", {{"model", "b"}}), 2);
  EXPECT_EQ(value("castserve_device_allocated_bytes", {{"device", "cpu"}}),
            1000);
  EXPECT_EQ(value("castserve_device_peak_allocated_bytes", {{"device", "cpu"}}),
            5000);
  EXPECT_EQ(value("castserve_device_allocated_bytes", {{"device", "cuda:0"}}),
            3000);
  EXPECT_EQ(
      value("castserve_device_peak_allocated_bytes", {{"device", "cuda:0"}}),
      15000);
  EXPECT_EQ(value("castserve_memory_budget_bytes", {}), 123456);
}

TEST(ServingMetricsTest, ExportsTiersTheirMovesAndWakeTimes) {
  LifecycleMetrics lifecycle;
  lifecycle.SetTier("a", casting::WeightTier::kHot);
  lifecycle.RecordTierMove("a", casting::WeightTier::kHot,
                           casting::WeightTier::kCool, "pressure");
  lifecycle.RecordTierMove("a", casting::WeightTier::kHot,
                           casting::WeightTier::kCool, "pressure");
  lifecycle.RecordTierMove("b", casting::WeightTier::kHot,
                           casting::WeightTier::kWarm, "keep_alive");
  lifecycle.RecordWake(casting::WeightTier::kCool, absl::Milliseconds(30));
  lifecycle.SetWakeRate("a", casting::WeightTier::kCool, 2.5e9);
  ServingMetricsOptions options;
  options.model_states = [] {
    return std::vector<ModelStateSample>{{"a", "1", "READY"},
                                         {"b", "1", "UNAVAILABLE"}};
  };
  options.lifecycle = &lifecycle;
  const std::vector<MetricFamily> families =
      ServingMetrics(std::move(options)).Collect();

  const ClientMetric* tier = Find(families, "castserve_model_tier", {});
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->gauge.value, 2) << "cool";
  EXPECT_EQ(Find(families, "castserve_model_tier", {{"model", "b"}}), nullptr)
      << "b is not READY";
  const ClientMetric* moves = Find(
      families, "castserve_tier_moves_total",
      {{"model", "a"}, {"from", "hot"}, {"to", "cool"}, {"cause", "pressure"}});
  ASSERT_NE(moves, nullptr);
  EXPECT_EQ(moves->counter.value, 2);
  EXPECT_NE(Find(families, "castserve_tier_moves_total",
                 {{"model", "b"}, {"cause", "keep_alive"}}),
            nullptr);
  const ClientMetric* wake =
      Find(families, "castserve_wake_seconds", {{"tier", "cool"}});
  ASSERT_NE(wake, nullptr);
  EXPECT_EQ(wake->histogram.sample_count, 1u);
  EXPECT_NEAR(wake->histogram.sample_sum, 0.03, 1e-9);
  const ClientMetric* rate =
      Find(families, "castserve_wake_rate_bytes_per_second",
           {{"model", "a"}, {"from", "cool"}});
  ASSERT_NE(rate, nullptr);
  EXPECT_EQ(rate->gauge.value, 2.5e9);
  EXPECT_EQ(
      Find(families, "castserve_wake_rate_bytes_per_second", {{"model", "b"}}),
      nullptr)
      << "b never woke";
}

TEST(ServingMetricsTest, KnowsEveryStateTheManagerReports) {
  for (ModelState state : {ModelState::kUnavailable, ModelState::kLoading,
                           ModelState::kReady, ModelState::kUnloading}) {
    ServingMetricsOptions options;
    options.model_states = [state] {
      return std::vector<ModelStateSample>{{"m", "1", ModelStateName(state)}};
    };
    const std::vector<MetricFamily> families =
        ServingMetrics(std::move(options)).Collect();
    const ClientMetric* metric =
        Find(families, "castserve_model_state",
             {{"model", "m"}, {"state", ModelStateName(state)}});
    ASSERT_NE(metric, nullptr) << ModelStateName(state);
    EXPECT_EQ(metric->gauge.value, 1);
  }
}

// --- Accuracy: a model of known weight and activation sizes ----------------

constexpr int kLayers = 4;
constexpr int64_t kWidth = 512;
constexpr int64_t kBatch = 4;
constexpr int64_t kF32 = 4;
constexpr int64_t kWeightBytes = kWidth * kWidth * kF32;  // 1 MiB.
constexpr int64_t kActivationBytes = kBatch * kWidth * kF32;

// x -> linear_0 -> ... -> linear_{kLayers-1}, each without bias. Each
// layer's compute copies are released right after it, as the casting hooks
// do.
class ChainModel final : public models::Model {
 public:
  ChainModel(std::shared_ptr<const casting::Checkpoint> checkpoint,
             const casting::WeightOptions& options)
      : root_("", "Chain"),
        specs_in_{{"x", at::kFloat, {-1, kWidth}}},
        specs_out_{{"y", at::kFloat, {-1, kWidth}}} {
    for (int i = 0; i < kLayers; ++i) {
      const std::string name = absl::StrCat("layers.", i);
      models::Module* layer =
          root_.AddChild(std::make_unique<models::Module>(name, "Linear"));
      absl::StatusOr<std::unique_ptr<casting::Weight>> weight =
          casting::Weight::Create(checkpoint, name + ".weight", options);
      EXPECT_TRUE(weight.ok()) << weight.status();
      layer->AddWeight("weight", *std::move(weight));
      layers_.push_back(layer);
    }
  }

  std::string architecture() const override { return "Chain"; }
  const std::vector<models::TensorSpec>& inputs() const override {
    return specs_in_;
  }
  const std::vector<models::TensorSpec>& outputs() const override {
    return specs_out_;
  }
  models::Module& root() override { return root_; }

 private:
  models::NamedTensors ForwardImpl(
      models::ForwardContext& context,
      const models::NamedTensors& inputs) const override {
    at::Tensor x = inputs.at("x");
    for (const models::Module* layer : layers_) {
      {
        models::ModuleCall call(*layer, context);
        x = at::linear(x, layer->Param(context, "weight"));
      }
      context.Release(layer);
    }
    return {{"y", x}};
  }

  models::Module root_;
  std::vector<const models::Module*> layers_;
  std::vector<models::TensorSpec> specs_in_;
  std::vector<models::TensorSpec> specs_out_;
};

std::shared_ptr<const casting::Checkpoint> WriteChainCheckpoint() {
  const std::string path = absl::StrCat(
      std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
      "/chain_", getpid(), ".safetensors");
  std::string data;
  std::vector<casting::test_util::HeaderTensor> tensors;
  for (int i = 0; i < kLayers; ++i) {
    const at::Tensor values = at::randn({kWidth, kWidth}, at::kFloat) * 0.05;
    const uint64_t begin = data.size();
    data.append(static_cast<const char*>(values.data_ptr()), values.nbytes());
    tensors.push_back({absl::StrCat("layers.", i, ".weight"),
                       "F32",
                       {kWidth, kWidth},
                       begin,
                       data.size()});
  }
  EXPECT_TRUE(casting::test_util::WriteSafetensorsFile(
                  path, casting::test_util::MakeHeaderJson(tensors), data)
                  .ok());
  absl::StatusOr<std::unique_ptr<casting::Checkpoint>> checkpoint =
      casting::OpenSafetensors(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return std::shared_ptr<const casting::Checkpoint>(*std::move(checkpoint));
}

// A served chain model whose weights were made resident at load, under the
// model's tag (as the factory's eager load does).
std::shared_ptr<BatchingServedModel> ServeChain(
    const casting::WeightOptions& options) {
  auto model = std::make_shared<ChainModel>(WriteChainCheckpoint(), options);
  std::unique_ptr<TrackedModelId> id = TrackedModelId::Register("chain");
  {
    casting::ScopedModelTag tag(id->id());
    model->root().Visit([](models::Module& module) {
      for (const auto& [name, weight] : module.weights()) {
        EXPECT_TRUE(weight->Materialize().ok());
      }
    });
  }
  inference::ModelConfig config;
  config.set_name("chain");
  config.set_max_batch_size(8);
  absl::StatusOr<std::unique_ptr<BatchingServedModel>> served =
      BatchingServedModel::Create(config, model, std::move(id));
  EXPECT_TRUE(served.ok()) << served.status();
  return std::shared_ptr<BatchingServedModel>(*std::move(served));
}

absl::Status InferOnce(ServedModel& model,
                       std::vector<std::string> requested = {}) {
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(kBatch);
  input->add_shape(kWidth);
  const at::Tensor x = at::randn({kBatch, kWidth}, at::kFloat);
  request.add_raw_input_contents()->assign(
      static_cast<const char*>(x.data_ptr()), x.nbytes());
  for (const std::string& name : requested) {
    request.add_outputs()->set_name(name);
  }
  inference::ModelInferResponse response;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  absl::Notification done;
  absl::Status status;
  model.Infer(std::move(call), [&](absl::Status result) {
    status = std::move(result);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

std::vector<MetricFamily> CollectFor(std::shared_ptr<ServedModel> model) {
  ServingMetricsOptions options;
  options.ready_models = [model] {
    return std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>{
        {"chain", model}};
  };
  options.devices = {casting::TrackingAllocator::Installed()};
  return ServingMetrics(std::move(options)).Collect();
}

struct Expected {
  int64_t model_peak_bytes;
  int64_t batch_peak_bytes;
  int64_t resident_bytes;
  std::string format;
  // Transient compute copies decoded per request (all f32 layers).
  int64_t compute_copies_per_request;
};

double CounterValue(const std::vector<MetricFamily>& families,
                    const std::string& name, const LabelMap& labels) {
  const ClientMetric* metric = Find(families, name, labels);
  EXPECT_NE(metric, nullptr) << name;
  return metric == nullptr ? -1 : metric->counter.value;
}

// One storage copy per layer made at load; `compute_copies` f32 copies
// decoded since, all transient.
void CheckMaterializations(const std::vector<MetricFamily>& families,
                           const Expected& expected, int64_t compute_copies) {
  const LabelMap storage = {{"model", "chain"}, {"copy", "storage"}};
  const LabelMap compute = {{"model", "chain"}, {"copy", "compute"}};
  EXPECT_EQ(
      CounterValue(families, "castserve_model_materializations_total", storage),
      kLayers);
  EXPECT_EQ(CounterValue(families, "castserve_model_materialized_bytes_total",
                         storage),
            expected.resident_bytes);
  EXPECT_GT(
      CounterValue(families, "castserve_model_materialization_seconds_total",
                   storage),
      0);
  EXPECT_EQ(
      CounterValue(families, "castserve_model_materializations_total", compute),
      compute_copies);
  EXPECT_EQ(CounterValue(families, "castserve_model_materialized_bytes_total",
                         compute),
            compute_copies * kWeightBytes);
  EXPECT_EQ(CounterValue(families, "castserve_model_transient_copy_bytes_total",
                         {{"model", "chain"}}),
            compute_copies * kWeightBytes);
  EXPECT_EQ(CounterValue(families, "castserve_model_prefetch_hits_total",
                         {{"model", "chain"}}),
            0)
      << "no prefetch configured";
}

void CheckAccuracy(const casting::WeightOptions& options,
                   const Expected& expected) {
  ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  std::shared_ptr<BatchingServedModel> served = ServeChain(options);
  constexpr int kRequests = 3;
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(InferOnce(*served).ok());
  const std::vector<MetricFamily> families = CollectFor(served);
  const LabelMap model = {{"model", "chain"}, {"version", "1"}};

  const ClientMetric* resident = Find(
      families, "castserve_model_weight_bytes",
      {{"model", "chain"}, {"state", "resident"}, {"format", expected.format}});
  ASSERT_NE(resident, nullptr);
  EXPECT_EQ(resident->gauge.value, expected.resident_bytes);

  const ClientMetric* peak =
      Find(families, "castserve_model_peak_allocated_bytes", model);
  ASSERT_NE(peak, nullptr);
  ::testing::Test::RecordProperty("model_peak_bytes",
                                  static_cast<int>(peak->gauge.value));
  EXPECT_NEAR(peak->gauge.value, expected.model_peak_bytes,
              0.01 * expected.model_peak_bytes);

  const ClientMetric* batch_peak =
      Find(families, "castserve_model_batch_peak_bytes", model);
  ASSERT_NE(batch_peak, nullptr);
  EXPECT_EQ(batch_peak->histogram.sample_count, kRequests);
  EXPECT_NEAR(batch_peak->histogram.sample_sum / kRequests,
              expected.batch_peak_bytes, 0.01 * expected.batch_peak_bytes);

  const ClientMetric* batch_size =
      Find(families, "castserve_batch_size", model);
  ASSERT_NE(batch_size, nullptr);
  EXPECT_EQ(batch_size->histogram.sample_count, kRequests);
  EXPECT_EQ(batch_size->histogram.sample_sum, kRequests * kBatch);
  const ClientMetric* success =
      Find(families, "castserve_request_success_total", model);
  ASSERT_NE(success, nullptr);
  EXPECT_EQ(success->counter.value, kRequests);
  const ClientMetric* items =
      Find(families, "castserve_inference_count_total", model);
  ASSERT_NE(items, nullptr);
  EXPECT_EQ(items->counter.value, kRequests * kBatch);
  CheckMaterializations(families, expected,
                        kRequests * expected.compute_copies_per_request);
}

// Casting off: f32 storage is the compute copy. The model holds its weights
// and, at the peak, two activations (a layer's input and output).
TEST(ServingMetricsAccuracyTest, PeakWithoutCastingIsWeightsPlusActivations) {
  casting::WeightOptions options;
  options.storage = casting::StorageFormat::Plain(casting::ElementType::kF32);
  options.compute_dtype = casting::ElementType::kF32;
  options.compute_copy = casting::ComputeCopyPolicy::kCached;
  CheckAccuracy(options,
                {kLayers * kWeightBytes + 2 * kActivationBytes,
                 2 * kActivationBytes, kLayers * kWeightBytes, "f32", 0});
}

// Casting on: fp8 per-row storage (1 byte per element + one f32 scale per
// row), one layer's f32 compute copy at a time.
TEST(ServingMetricsAccuracyTest, PeakWithCastingIsStoragePlusOneLayer) {
  casting::WeightOptions options;
  options.storage = {casting::ElementType::kF8E4M3FN,
                     casting::Scaling::kPerRow};
  options.compute_dtype = casting::ElementType::kF32;
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  constexpr int64_t kStorageBytes = kLayers * (kWidth * kWidth + kWidth * kF32);
  CheckAccuracy(options,
                {kStorageBytes + kWeightBytes + 2 * kActivationBytes,
                 kWeightBytes + 2 * kActivationBytes, kStorageBytes,
                 absl::AsciiStrToLower(options.storage.ToString()), kLayers});
}

TEST(ServingMetricsTest, CountsFailuresByReasonAndServesThemAsText) {
  ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  casting::WeightOptions options;
  std::shared_ptr<BatchingServedModel> served = ServeChain(options);
  ASSERT_TRUE(InferOnce(*served).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(InferOnce(*served, {"absent"})));
  EXPECT_TRUE(absl::IsInvalidArgument(InferOnce(*served, {"absent"})));

  ServingMetricsOptions metrics_options;
  metrics_options.ready_models = [served] {
    return std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>{
        {"chain", served}};
  };
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start(
          "127.0.0.1", 0, HttpServerOptions{},
          {std::make_shared<ServingMetrics>(std::move(metrics_options))},
          [] { return true; });
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const std::string text = (*exporter)->Scrape();
  EXPECT_THAT(text, HasSubstr("castserve_request_failure_total{model=\"chain\","
                              "version=\"1\",reason=\"INVALID_ARGUMENT\"} 2"));
  EXPECT_THAT(text, HasSubstr("castserve_request_success_total{model=\"chain\","
                              "version=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("# TYPE castserve_model_batch_peak_bytes "
                              "histogram"));
  EXPECT_THAT(text, HasSubstr("castserve_batch_size_bucket{model=\"chain\","
                              "version=\"1\",le=\"+Inf\"} 1"));
}

// The generation families of `model` (named "g") alone.
std::vector<MetricFamily> CollectOne(std::shared_ptr<ServedModel> model) {
  ServingMetricsOptions options;
  options.model_states = [] {
    return std::vector<ModelStateSample>{{"g", "1", "READY"}};
  };
  options.ready_models = [model] {
    return std::vector<std::pair<std::string, std::shared_ptr<ServedModel>>>{
        {"g", model}};
  };
  options.lifecycle = nullptr;
  options.unrouted = nullptr;
  return ServingMetrics(std::move(options)).Collect();
}

TEST(ServingMetricsTest, ExportsGenerationFamiliesOnlyForGenerationModels) {
  auto plain = std::make_shared<FakeServedModel>();
  for (const MetricFamily& family : CollectOne(plain)) {
    EXPECT_NE(family.name, "castserve_kv_cache_bytes");
    EXPECT_NE(family.name, "castserve_prefix_cache_bytes");
    EXPECT_NE(family.name, "nv_inference_first_response_histogram_ms");
  }
  auto generation = std::make_shared<FakeServedModel>();
  generation->activity_value.kv_cache =
      ServedModelActivity::KvCache{64, 256, 48, 80, 32};
  ModelStatisticsRecorder recorder;
  recorder.RecordFirstToken(absl::Milliseconds(30));
  recorder.RecordNextToken(absl::Milliseconds(5));
  recorder.RecordNextToken(absl::Milliseconds(7));
  generation->stats = recorder.snapshot();
  const std::vector<MetricFamily> families = CollectOne(generation);
  const LabelMap labels = {{"model", "g"}, {"version", "1"}};
  const ClientMetric* kv = Find(families, "castserve_kv_cache_bytes", labels);
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->gauge.value, 64);
  const ClientMetric* peak =
      Find(families, "castserve_kv_cache_peak_bytes", labels);
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ(peak->gauge.value, 256);
  const ClientMetric* hits =
      Find(families, "castserve_prefix_cache_hit_tokens_total", labels);
  ASSERT_NE(hits, nullptr);
  EXPECT_EQ(hits->counter.value, 48);
  const ClientMetric* misses =
      Find(families, "castserve_prefix_cache_miss_tokens_total", labels);
  ASSERT_NE(misses, nullptr);
  EXPECT_EQ(misses->counter.value, 80);
  const ClientMetric* cached =
      Find(families, "castserve_prefix_cache_bytes", labels);
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->gauge.value, 32);
  const ClientMetric* tokens =
      Find(families, "castserve_generation_tokens_total", labels);
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->counter.value, 3);
  const ClientMetric* first =
      Find(families, "nv_inference_first_response_histogram_ms", labels);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->histogram.sample_count, 1u);
  EXPECT_DOUBLE_EQ(first->histogram.sample_sum, 30);
  const ClientMetric* inter =
      Find(families, "castserve_generation_inter_token_seconds", labels);
  ASSERT_NE(inter, nullptr);
  EXPECT_EQ(inter->histogram.sample_count, 2u);
  EXPECT_NEAR(inter->histogram.sample_sum, 0.012, 1e-9);
}

TEST(ServingMetricsTest, CancelledStreamReturnsKvCacheMetricToZero) {
  GenerationModelParts parts;
  parts.config.set_name("g");
  parts.config.mutable_generation()->set_kv_cache_bytes(1 << 20);
  parts.vocab_size = 100;
  parts.max_positions = 100;
  parts.engine = std::make_unique<test_util::FakeGenerationEngine>(
      [](const std::vector<int64_t>&, int64_t) -> int64_t { return 7; },
      absl::Milliseconds(2));
  std::shared_ptr<ServedModel> model =
      *GenerationServedModel::Create(std::move(parts));
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT64");
  input->add_shape(2);
  input->mutable_contents()->add_int64_contents(1);
  input->mutable_contents()->add_int64_contents(2);
  (*request.mutable_parameters())["max_tokens"].set_int64_param(90);
  inference::ModelInferResponse response;
  std::atomic<bool> cancelled{false};
  double kv_while_streaming = -1;
  absl::Notification done;
  absl::Status status;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  call.is_cancelled = [&] { return cancelled.load(); };
  int parts_seen = 0;
  call.partial_response = [&](inference::ModelInferResponse) {
    if (++parts_seen == 3) {
      const ClientMetric* kv =
          Find(CollectOne(model), "castserve_kv_cache_bytes", {{"model", "g"}});
      kv_while_streaming = kv == nullptr ? -1 : kv->gauge.value;
      cancelled = true;
    }
  };
  model->Infer(std::move(call), [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_GT(kv_while_streaming, 0);
  const std::vector<MetricFamily> after = CollectOne(model);
  const ClientMetric* kv =
      Find(after, "castserve_kv_cache_bytes", {{"model", "g"}});
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->gauge.value, 0);
  const ClientMetric* peak =
      Find(after, "castserve_kv_cache_peak_bytes", {{"model", "g"}});
  ASSERT_NE(peak, nullptr);
  EXPECT_GE(peak->gauge.value, kv_while_streaming);
}

}  // namespace
}  // namespace castserve
