#include "server/servables/batching/instance_runner.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "c10/util/Exception.h"
#include "casting/memory/device_model_memory.h"
#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"
#include "models/module.h"

namespace castserve {
namespace {

// "x" [batch, n] -> "y" = x + 1, "sum" = x.sum(1). A forward with a
// negative value fails as LibTorch fails on a bad value (INVALID_ARGUMENT).
class PlusOneModel : public models::Model {
 public:
  PlusOneModel() : root_("", "PlusOne") {}
  std::string architecture() const override { return "plus_one"; }
  const std::vector<models::TensorSpec>& inputs() const override {
    return inputs_;
  }
  const std::vector<models::TensorSpec>& outputs() const override {
    return outputs_;
  }
  models::Module& root() override { return root_; }
  int forwards() const { return forwards_; }

 protected:
  models::NamedTensors ForwardImpl(
      models::ForwardContext&,
      const models::NamedTensors& inputs) const override {
    ++forwards_;
    const at::Tensor& x = inputs.at("x");
    TORCH_CHECK_VALUE(!(x < 0).any().item<bool>(), "negative");
    return {{"y", x + 1}, {"sum", x.sum(1)}};
  }

 private:
  models::Module root_;
  const std::vector<models::TensorSpec> inputs_ = {{"x", at::kFloat, {-1, 2}}};
  const std::vector<models::TensorSpec> outputs_ = {{"y", at::kFloat, {-1, 2}},
                                                    {"sum", at::kFloat, {-1}}};
  mutable std::atomic<int> forwards_{0};
};

QueuedPtr Entry(const models::Model& model, at::Tensor x,
                std::vector<std::string> requested = {}) {
  auto queued = std::make_unique<QueuedRequest>();
  queued->batch_size = x.size(0);
  queued->request = std::make_unique<InferenceRequest>(
      model.CheckInputs({{"x", std::move(x)}}).value());
  queued->request->batch_size = queued->batch_size;
  queued->request->requested_outputs = std::move(requested);
  return queued;
}

// Records what the runner completes, by the request's first value.
struct Completions {
  absl::Mutex mu;
  std::map<float, InferenceResult> by_first_value;
  std::vector<int64_t> batch_items;

  InstanceRunner::Complete complete() {
    return [this](QueuedPtr queued, InferenceResult result, bool) {
      const float first =
          queued->request->inputs.tensors().at("x")[0][0].item<float>();
      absl::MutexLock lock(&mu);
      by_first_value.emplace(first, std::move(result));
    };
  }
  InstanceRunner::RecordBatch record_batch() {
    return [this](int64_t items, absl::Duration, int64_t) {
      absl::MutexLock lock(&mu);
      batch_items.push_back(items);
    };
  }
};

// Runs `batch` on a started runner of `model`, then stops it.
void ExecuteOnce(std::shared_ptr<PlusOneModel> model,
                 std::vector<QueuedPtr> batch, Completions& done) {
  InstanceRunner runner(std::move(model), {});
  RequestQueue queue{RequestQueue::Options()};
  BatchPlanner planner{BatchPlanner::Options()};
  runner.Start(&queue, &planner, done.complete(), done.record_batch(), nullptr);
  runner.Execute(std::move(batch));
  queue.Stop();
  runner.Join();
}

TEST(InstanceRunnerTest, SplitsABatchsOutputsBackPerRequest) {
  auto model = std::make_shared<PlusOneModel>();
  Completions done;
  std::vector<QueuedPtr> batch;
  batch.push_back(Entry(*model, at::full({1, 2}, 1.0f)));
  batch.push_back(Entry(*model, at::full({2, 2}, 10.0f), {"sum"}));
  ExecuteOnce(model, std::move(batch), done);

  EXPECT_EQ(model->forwards(), 1);
  EXPECT_EQ(done.batch_items, std::vector<int64_t>({3}));
  const InferenceResult& one = done.by_first_value.at(1.0f);
  ASSERT_TRUE(one.outputs.ok());
  EXPECT_EQ(one.executed_batch_size, 3);
  EXPECT_TRUE(at::equal(one.outputs->at("y"), at::full({1, 2}, 2.0f)));
  const InferenceResult& two = done.by_first_value.at(10.0f);
  ASSERT_TRUE(two.outputs.ok());
  EXPECT_EQ(two.outputs->size(), 1u);  // Only the requested output.
  EXPECT_TRUE(at::equal(two.outputs->at("sum"), at::full({2}, 20.0f)));
}

TEST(InstanceRunnerTest, ABadValueFailsOnlyItsOwnRequest) {
  auto model = std::make_shared<PlusOneModel>();
  Completions done;
  std::vector<QueuedPtr> batch;
  batch.push_back(Entry(*model, at::full({1, 2}, 1.0f)));
  batch.push_back(Entry(*model, at::full({1, 2}, -1.0f)));
  batch.push_back(Entry(*model, at::full({1, 2}, 2.0f)));
  ExecuteOnce(model, std::move(batch), done);

  // The joined forward, then each request alone.
  EXPECT_EQ(model->forwards(), 4);
  EXPECT_TRUE(done.by_first_value.at(1.0f).outputs.ok());
  EXPECT_TRUE(done.by_first_value.at(2.0f).outputs.ok());
  EXPECT_EQ(done.by_first_value.at(-1.0f).outputs.status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(done.batch_items.size(), 3u);  // The failed join is not a batch.
}

TEST(InstanceRunnerTest, InstancesRunWhatTheQueueHandsThem) {
  auto model = std::make_shared<PlusOneModel>();
  InstanceRunner::Options options;
  options.instance_count = 2;
  InstanceRunner runner(model, options);
  Completions done;
  RequestQueue queue{RequestQueue::Options()};
  BatchPlanner planner{BatchPlanner::Options()};
  absl::Notification all_done;
  std::atomic<int> remaining{3};
  auto complete = done.complete();
  runner.Start(
      &queue, &planner,
      [&](QueuedPtr queued, InferenceResult result, bool was_running) {
        complete(std::move(queued), std::move(result), was_running);
        if (was_running) queue.FinishRunning();
        if (--remaining == 0) all_done.Notify();
      },
      done.record_batch(), nullptr);
  for (float value : {1.0f, 2.0f, 3.0f}) {
    QueuedPtr queued = Entry(*model, at::full({1, 2}, value));
    ASSERT_TRUE(queue.Push(queued).ok());
  }
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  queue.Stop();
  runner.Join();
  EXPECT_EQ(done.by_first_value.size(), 3u);
  EXPECT_EQ(queue.pending_requests(), 0);
}

// PlusOneModel that, like a CUDA forward seen by the caching allocator's
// tracker (casting/memory/device_memory_cuda.cc), reports device blocks under
// the forward thread's model tag: 3000 + 1000 bytes made, then freed.
class DeviceFeedingModel : public PlusOneModel {
 protected:
  models::NamedTensors ForwardImpl(
      models::ForwardContext& context,
      const models::NamedTensors& inputs) const override {
    casting::DeviceModelMemory& device = casting::DeviceModelMemory::Global();
    const std::string tag = casting::ScopedModelTag::CurrentModelId();
    device.OnAllocate(tag, 0, 0xA000, 3000);
    device.OnAllocate(tag, 0, 0xB000, 1000);
    device.OnFree(0, 0xB000);
    device.OnFree(0, 0xA000);
    return PlusOneModel::ForwardImpl(context, inputs);
  }
};

TEST(InstanceRunnerTest, DeviceBatchPeakIsTheRiseOfTheModelsDeviceBytes) {
  absl::StatusOr<casting::TrackingAllocator*> allocator =
      casting::TrackingAllocator::InstallTrackingCpuAllocator();
  ASSERT_TRUE(allocator.ok());
  const std::string tag = "device_peak#1";
  ASSERT_TRUE((*allocator)->RegisterModel(tag).ok());
  casting::DeviceModelMemory& device = casting::DeviceModelMemory::Global();
  device.Register(tag);
  device.OnAllocate(tag, 0, 0x1000, 500);  // Resident before the batch.

  auto model = std::make_shared<DeviceFeedingModel>();
  InstanceRunner::Options options;
  options.model_tag = tag;
  options.device_batch_peak = true;
  InstanceRunner runner(model, options);
  RequestQueue queue{RequestQueue::Options()};
  BatchPlanner planner{BatchPlanner::Options()};
  std::vector<int64_t> peaks;
  runner.Start(
      &queue, &planner, [](QueuedPtr, InferenceResult, bool) {},
      [&](int64_t, absl::Duration, int64_t peak) { peaks.push_back(peak); },
      nullptr);
  std::vector<QueuedPtr> batch;
  batch.push_back(Entry(*model, at::full({1, 2}, 1.0f)));
  runner.Execute(std::move(batch));
  queue.Stop();
  runner.Join();

  EXPECT_EQ(peaks, std::vector<int64_t>({4000}));
  EXPECT_EQ(device.Usage(tag).live_bytes, 500);
  EXPECT_EQ(device.Usage(tag).peak_bytes, 4500);
  device.OnFree(0, 0x1000);
  device.Unregister(tag);
  ASSERT_TRUE((*allocator)->UnregisterModel(tag).ok());
}

}  // namespace
}  // namespace castserve
