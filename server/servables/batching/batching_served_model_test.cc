#include "server/servables/batching/batching_served_model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "c10/util/Exception.h"
#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"
#include "models/model.h"
#include "server/servables/text_input.h"
#include "server/test_util/fake_tokenizer.h"

namespace castserve {
namespace {

using ::castserve::models::NamedTensors;

// "x" [batch, n] f32 -> "doubled" = 2x, "row_sum" = x.sum(1). Its forward
// fails on negative values as LibTorch fails on a bad value (c10::ValueError,
// INVALID_ARGUMENT) of one request. Each forward takes `forward_time` and is
// counted.
class FakeModel : public models::Model {
 public:
  explicit FakeModel(absl::Duration forward_time = absl::ZeroDuration())
      : forward_time_(forward_time), root_("", "FakeModel") {}

  std::string architecture() const override { return "fake"; }
  const std::vector<models::TensorSpec>& inputs() const override {
    return inputs_;
  }
  const std::vector<models::TensorSpec>& outputs() const override {
    return outputs_;
  }
  models::Module& root() override { return root_; }

  int forwards_started() const { return forwards_started_; }
  // LibTorch's intra-op thread count seen by the last forward.
  int last_intra_op_threads() const { return last_intra_op_threads_; }
  int max_concurrent_forwards() const { return max_running_; }

 protected:
  NamedTensors ForwardImpl(models::ForwardContext& context,
                           const NamedTensors& inputs) const override {
    ++forwards_started_;
    TORCH_CHECK_VALUE(!(inputs.at("x") < 0).any().item<bool>(),
                      "x must not be negative");
    last_intra_op_threads_ = at::get_num_threads();
    const int running = ++running_;
    int seen = max_running_;
    while (running > seen &&
           !max_running_.compare_exchange_weak(seen, running)) {
    }
    absl::SleepFor(forward_time_);
    --running_;
    const at::Tensor& x = inputs.at("x");
    return {{"doubled", x * 2}, {"row_sum", x.sum(1)}};
  }

 private:
  const absl::Duration forward_time_;
  models::Module root_;
  const std::vector<models::TensorSpec> inputs_ = {
      {"x", at::kFloat, {-1, -1}, false}};
  const std::vector<models::TensorSpec> outputs_ = {
      {"doubled", at::kFloat, {-1, -1}, false},
      {"row_sum", at::kFloat, {-1}, false}};
  mutable std::atomic<int> forwards_started_{0};
  mutable std::atomic<int> last_intra_op_threads_{0};
  mutable std::atomic<int> running_{0};
  mutable std::atomic<int> max_running_{0};
};

inference::ModelConfig BatchingConfig(int max_batch_size,
                                      int64_t max_queue_delay_us) {
  inference::ModelConfig config;
  config.set_name("fake");
  config.set_max_batch_size(max_batch_size);
  config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(
      max_queue_delay_us);
  return config;
}

std::shared_ptr<BatchingServedModel> Serve(
    inference::ModelConfig config, std::shared_ptr<FakeModel> model,
    std::unique_ptr<TrackedModelId> tracked_id = nullptr,
    int intra_op_threads = 0) {
  absl::StatusOr<std::unique_ptr<BatchingServedModel>> served =
      BatchingServedModel::Create(std::move(config), std::move(model),
                                  std::move(tracked_id), intra_op_threads);
  EXPECT_TRUE(served.ok()) << served.status();
  return served.ok() ? std::shared_ptr<BatchingServedModel>(*std::move(served))
                     : nullptr;
}

// `rows` rows of `width` values, row r = base + r.
at::Tensor Rows(int rows, int width, float base) {
  return (at::arange(rows, at::kFloat).unsqueeze(1) + base)
             .expand({rows, width}) *
         at::ones({rows, width});
}

// A request for `served` whose "x" is Rows(rows, width, base), checked by
// its model as the request edge would.
InferenceRequest RowsRequest(const BatchingServedModel& served, int rows,
                             int width, float base) {
  InferenceRequest request(
      served.model().CheckInputs({{"x", Rows(rows, width, base)}}).value());
  request.batch_size = served.config().max_batch_size() > 0 ? rows : 1;
  return request;
}

std::future<InferenceResult> Send(BatchingServedModel& model,
                                  InferenceRequest request) {
  auto promise = std::make_shared<std::promise<InferenceResult>>();
  std::future<InferenceResult> future = promise->get_future();
  model.Enqueue(std::move(request), [promise](InferenceResult result) {
    promise->set_value(std::move(result));
  });
  return future;
}

std::future<InferenceResult> SendRows(BatchingServedModel& served, int rows,
                                      int width, float base) {
  return Send(served, RowsRequest(served, rows, width, base));
}

// One wire request "x" of `rows` x `width` FP32 zeros through Infer.
absl::Status InferWire(ServedModel& model, int rows, int width,
                       const std::vector<std::string>& requested = {},
                       inference::ModelInferResponse* response = nullptr) {
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(rows);
  input->add_shape(width);
  request.add_raw_input_contents()->assign(size_t{4} * rows * width, '\0');
  for (const std::string& name : requested) {
    request.add_outputs()->set_name(name);
  }
  inference::ModelInferResponse scratch;
  InferenceCall call;
  call.request = &request;
  call.response = response != nullptr ? response : &scratch;
  std::promise<absl::Status> promise;
  model.Infer(std::move(call),
              [&promise](absl::Status status) { promise.set_value(status); });
  return promise.get_future().get();
}

void WaitUntil(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!condition() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(condition());
}

TEST(BatchingServedModelTest, JoinsRequestsThatArriveTogether) {
  auto model = std::make_shared<FakeModel>();
  auto served = Serve(BatchingConfig(8, 2'000'000), model);
  std::vector<std::future<InferenceResult>> futures;
  for (int i = 0; i < 8; ++i) {
    futures.push_back(SendRows(*served, 1, 4, 10.0f * i));
  }
  for (int i = 0; i < 8; ++i) {
    InferenceResult result = futures[i].get();
    ASSERT_TRUE(result.outputs.ok()) << result.outputs.status();
    EXPECT_EQ(result.executed_batch_size, 8);
    EXPECT_TRUE(
        at::equal(result.outputs->at("doubled"), at::full({1, 4}, 20.0f * i)));
    EXPECT_TRUE(
        at::equal(result.outputs->at("row_sum"), at::full({1}, 40.0f * i)));
  }
  const ServedModelStatistics stats = served->statistics();
  EXPECT_EQ(stats.execution_count, 1u);
  EXPECT_EQ(stats.inference_count, 8u);
  EXPECT_EQ(stats.success_count, 8u);
  ASSERT_EQ(stats.batches.count(8), 1u);
  EXPECT_EQ(stats.batches.at(8).first, 1u);
  EXPECT_EQ(model->forwards_started(), 1);
}

TEST(BatchingServedModelTest, SplitsOutputsOfMultiItemRequestsBack) {
  auto served =
      Serve(BatchingConfig(6, 2'000'000), std::make_shared<FakeModel>());
  std::future<InferenceResult> one = SendRows(*served, 1, 3, 0);
  std::future<InferenceResult> two = SendRows(*served, 2, 3, 100);
  std::future<InferenceResult> three = SendRows(*served, 3, 3, 200);
  InferenceResult a = one.get(), b = two.get(), c = three.get();
  ASSERT_TRUE(a.outputs.ok() && b.outputs.ok() && c.outputs.ok());
  EXPECT_EQ(c.executed_batch_size, 6);
  EXPECT_TRUE(at::equal(b.outputs->at("doubled"), Rows(2, 3, 100) * 2));
  EXPECT_TRUE(at::equal(c.outputs->at("row_sum"), Rows(3, 3, 200).sum(1)));
  EXPECT_EQ(a.outputs->at("doubled").size(0), 1);
}

TEST(BatchingServedModelTest, ConcurrentClientsEachGetTheirOwnOutputs) {
  inference::ModelConfig config = BatchingConfig(8, 1'000);
  config.add_instance_group()->set_count(2);
  auto served = Serve(config, std::make_shared<FakeModel>());
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int client = 0; client < 8; ++client) {
    clients.emplace_back([&, client] {
      for (int i = 0; i < 50; ++i) {
        const int rows = 1 + (i % 3);
        const int width = 3 + (client % 2);
        InferenceRequest request =
            RowsRequest(*served, rows, width, 1000 * client + i);
        const at::Tensor expected = request.inputs.tensors().at("x") * 2;
        InferenceResult result = Send(*served, std::move(request)).get();
        if (!result.outputs.ok() ||
            !at::equal(result.outputs->at("doubled"), expected)) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(wrong, 0);
  const ServedModelStatistics stats = served->statistics();
  EXPECT_EQ(stats.success_count, 400u);
  EXPECT_LT(stats.execution_count, 400u);  // Some requests joined.
}

TEST(BatchingServedModelTest, RequestsOfDifferentShapesNeverJoin) {
  auto served =
      Serve(BatchingConfig(8, 100'000), std::make_shared<FakeModel>());
  std::future<InferenceResult> narrow = SendRows(*served, 1, 4, 1);
  std::future<InferenceResult> wide = SendRows(*served, 1, 5, 1);
  EXPECT_EQ(narrow.get().executed_batch_size, 1);
  EXPECT_EQ(wide.get().executed_batch_size, 1);
  EXPECT_EQ(served->statistics().batches.at(1).first, 2u);
}

// input_ids / attention_mask [batch, seq] -> "tokens" = the mask's row sums
// (f32 [batch]); records the sequence length of every forward.
class TokenCountModel : public models::Model {
 public:
  TokenCountModel() : root_("", "TokenCountModel") {}
  std::string architecture() const override { return "token_count"; }
  const std::vector<models::TensorSpec>& inputs() const override {
    return inputs_;
  }
  const std::vector<models::TensorSpec>& outputs() const override {
    return outputs_;
  }
  models::Module& root() override { return root_; }
  std::vector<int64_t> forward_lengths() const {
    absl::MutexLock lock(&mu_);
    return lengths_;
  }

 protected:
  NamedTensors ForwardImpl(models::ForwardContext& context,
                           const NamedTensors& inputs) const override {
    {
      absl::MutexLock lock(&mu_);
      lengths_.push_back(inputs.at("input_ids").size(1));
    }
    return {{"tokens", inputs.at("attention_mask").sum(1).to(at::kFloat)}};
  }

 private:
  models::Module root_;
  const std::vector<models::TensorSpec> inputs_ = {
      {"input_ids", at::kLong, {-1, -1}},
      {"attention_mask", at::kLong, {-1, -1}, true}};
  const std::vector<models::TensorSpec> outputs_ = {
      {"tokens", at::kFloat, {-1}}};
  mutable absl::Mutex mu_;
  mutable std::vector<int64_t> lengths_ ABSL_GUARDED_BY(mu_);
};

// One text request in flight through Infer; owns its messages.
struct TextCall {
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
  std::promise<absl::Status> done;
};

std::unique_ptr<TextCall> SendText(ServedModel& model,
                                   const std::string& text) {
  auto call = std::make_unique<TextCall>();
  auto* input = call->request.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents(text);
  InferenceCall infer;
  infer.request = &call->request;
  infer.response = &call->response;
  model.Infer(std::move(infer), [done = &call->done](absl::Status status) {
    done->set_value(status);
  });
  return call;
}

float TokensOf(const inference::ModelInferResponse& response) {
  float tokens = -1;
  if (response.raw_output_contents_size() == 1 &&
      response.raw_output_contents(0).size() == sizeof(float)) {
    std::memcpy(&tokens, response.raw_output_contents(0).data(), 4);
  }
  return tokens;
}

TEST(BatchingServedModelTest, TextRequestsJoinOnlyAtEqualPaddedLengths) {
  auto model = std::make_shared<TokenCountModel>();
  std::shared_ptr<const TextInput> text =
      TextInput::Create(std::make_shared<test_util::FakeTokenizer>(),
                        model->inputs(), /*max_length=*/0)
          .value();
  absl::StatusOr<std::unique_ptr<BatchingServedModel>> served =
      BatchingServedModel::Create(BatchingConfig(8, 300'000), model, nullptr, 0,
                                  nullptr, text);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ((*served)->inputs().back().name, "text");
  // Two of 4 tokens ([CLS] w w [SEP]) and two of 5, all queued together.
  const std::vector<std::string> texts = {"a b", "c d e", "f g", "h i j"};
  std::vector<std::unique_ptr<TextCall>> calls;
  for (const std::string& t : texts) calls.push_back(SendText(**served, t));
  for (size_t i = 0; i < calls.size(); ++i) {
    const absl::Status status = calls[i]->done.get_future().get();
    ASSERT_TRUE(status.ok()) << status;
    // Each request's answer is the one it gets alone: no extra padding.
    EXPECT_EQ(TokensOf(calls[i]->response), i % 2 == 0 ? 4 : 5) << texts[i];
  }
  std::vector<int64_t> lengths = model->forward_lengths();
  std::sort(lengths.begin(), lengths.end());
  EXPECT_EQ(lengths, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ((*served)->statistics().batches.at(2).first, 2u);
}

TEST(BatchingServedModelTest, PreferredBatchSizeRunsWithoutWaiting) {
  inference::ModelConfig config = BatchingConfig(8, 10'000'000);
  config.mutable_dynamic_batching()->add_preferred_batch_size(2);
  auto served = Serve(config, std::make_shared<FakeModel>());
  const absl::Time start = absl::Now();
  std::future<InferenceResult> first = SendRows(*served, 1, 2, 1);
  std::future<InferenceResult> second = SendRows(*served, 1, 2, 2);
  EXPECT_EQ(second.get().executed_batch_size, 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // Not the 10 s delay.
  EXPECT_TRUE(first.get().outputs.ok());
}

TEST(BatchingServedModelTest, WithoutDynamicBatchingEachRequestRunsAlone) {
  inference::ModelConfig config;
  config.set_max_batch_size(8);
  auto served = Serve(config, std::make_shared<FakeModel>());
  std::vector<std::future<InferenceResult>> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(SendRows(*served, 1, 2, i));
  for (auto& future : futures) EXPECT_EQ(future.get().executed_batch_size, 1);
  EXPECT_EQ(served->statistics().execution_count, 4u);
}

TEST(BatchingServedModelTest, QueuedRequestFailsAtItsDeadline) {
  auto model = std::make_shared<FakeModel>(absl::Milliseconds(800));
  inference::ModelConfig config;
  config.set_max_batch_size(4);
  auto served = Serve(config, model);
  std::future<InferenceResult> busy = SendRows(*served, 1, 2, 0);
  WaitUntil([&] { return model->forwards_started() == 1; });
  InferenceRequest late = RowsRequest(*served, 1, 2, 0);
  late.deadline = absl::Now() + absl::Milliseconds(30);
  const absl::Time start = absl::Now();
  InferenceResult result = Send(*served, std::move(late)).get();
  EXPECT_EQ(result.outputs.status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(600));  // Not after busy.
  EXPECT_TRUE(busy.get().outputs.ok());
  EXPECT_EQ(model->forwards_started(), 1);
  EXPECT_EQ(served->statistics().fail_count, 1u);
}

TEST(BatchingServedModelTest, QueuedRequestIsDroppedWhenCancelled) {
  auto model = std::make_shared<FakeModel>(absl::Milliseconds(800));
  auto served = Serve(inference::ModelConfig(), model);
  std::future<InferenceResult> busy = SendRows(*served, 1, 2, 0);
  WaitUntil([&] { return model->forwards_started() == 1; });
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  InferenceRequest request = RowsRequest(*served, 1, 2, 0);
  request.is_cancelled = [cancelled] { return cancelled->load(); };
  std::future<InferenceResult> future = Send(*served, std::move(request));
  absl::SleepFor(absl::Milliseconds(20));
  *cancelled = true;
  const absl::Time start = absl::Now();
  EXPECT_EQ(future.get().outputs.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_TRUE(busy.get().outputs.ok());
  EXPECT_EQ(model->forwards_started(), 1);
}

TEST(BatchingServedModelTest, FullQueueRejectsWithResourceExhausted) {
  auto model = std::make_shared<FakeModel>(absl::Milliseconds(300));
  inference::ModelConfig config = BatchingConfig(1, 0);
  config.mutable_dynamic_batching()
      ->mutable_default_queue_policy()
      ->set_max_queue_size(2);
  auto served = Serve(config, model);
  std::future<InferenceResult> running = SendRows(*served, 1, 2, 0);
  WaitUntil([&] { return model->forwards_started() == 1; });
  std::future<InferenceResult> queued1 = SendRows(*served, 1, 2, 0);
  std::future<InferenceResult> queued2 = SendRows(*served, 1, 2, 0);
  std::future<InferenceResult> rejected = SendRows(*served, 1, 2, 0);
  // Rejected inline: the answer is there before Infer returned.
  ASSERT_EQ(rejected.wait_for(std::chrono::seconds(0)),
            std::future_status::ready);
  EXPECT_EQ(rejected.get().outputs.status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(served->pending_requests(), 3);
  EXPECT_TRUE(running.get().outputs.ok());
  EXPECT_TRUE(queued1.get().outputs.ok());
  EXPECT_TRUE(queued2.get().outputs.ok());
  WaitUntil([&] { return served->pending_requests() == 0; });
}

TEST(BatchingServedModelTest, InstancesRunForwardsConcurrently) {
  auto model = std::make_shared<FakeModel>(absl::Milliseconds(300));
  inference::ModelConfig config;
  config.add_instance_group()->set_count(3);
  auto served = Serve(config, model);
  std::vector<std::future<InferenceResult>> futures;
  for (int i = 0; i < 3; ++i) futures.push_back(SendRows(*served, 1, 2, i));
  for (auto& future : futures) EXPECT_TRUE(future.get().outputs.ok());
  EXPECT_EQ(model->max_concurrent_forwards(), 3);
}

TEST(BatchingServedModelTest, EachModelsForwardsRunOnItsOwnThreadCount) {
  // Two models in one process, each instance thread with its own count.
  auto three = std::make_shared<FakeModel>();
  auto one = std::make_shared<FakeModel>();
  auto served_three = Serve(inference::ModelConfig(), three, nullptr, 3);
  auto served_one = Serve(inference::ModelConfig(), one, nullptr, 1);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(SendRows(*served_three, 1, 2, 0).get().outputs.ok());
    ASSERT_TRUE(SendRows(*served_one, 1, 2, 0).get().outputs.ok());
    EXPECT_EQ(three->last_intra_op_threads(), 3);
    EXPECT_EQ(one->last_intra_op_threads(), 1);
  }
}

TEST(BatchingServedModelTest, OneBadRequestFailsAloneInsideABatch) {
  auto served =
      Serve(BatchingConfig(4, 2'000'000), std::make_shared<FakeModel>());
  std::vector<std::future<InferenceResult>> futures;
  for (int i = 0; i < 4; ++i) {
    futures.push_back(SendRows(*served, 1, 2, i == 2 ? -5.0f : i));
  }
  for (int i = 0; i < 4; ++i) {
    InferenceResult result = futures[i].get();
    if (i == 2) {
      EXPECT_EQ(result.outputs.status().code(),
                absl::StatusCode::kInvalidArgument);
    } else {
      EXPECT_TRUE(result.outputs.ok()) << result.outputs.status();
    }
  }
  EXPECT_EQ(served->statistics().fail_count, 1u);
  EXPECT_EQ(served->statistics().success_count, 3u);
}

TEST(BatchingServedModelTest, RequestedOutputsFilterTheResponse) {
  auto served = Serve(inference::ModelConfig(), std::make_shared<FakeModel>());
  InferenceRequest request = RowsRequest(*served, 1, 2, 1);
  request.requested_outputs = {"row_sum"};
  InferenceResult result = Send(*served, std::move(request)).get();
  ASSERT_TRUE(result.outputs.ok());
  EXPECT_EQ(result.outputs->size(), 1u);
  EXPECT_EQ(result.outputs->count("row_sum"), 1u);

  // Over the wire: an unknown output is refused where the request enters,
  // and counted once.
  inference::ModelInferResponse response;
  EXPECT_TRUE(InferWire(*served, 1, 2, {"row_sum"}, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "row_sum");
  EXPECT_EQ(InferWire(*served, 1, 2, {"logits"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(served->statistics().fail_count, 1u);
}

TEST(BatchingServedModelTest, BatchAboveMaxBatchSizeIsInvalid) {
  auto served = Serve(BatchingConfig(2, 0), std::make_shared<FakeModel>());
  EXPECT_EQ(InferWire(*served, 3, 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(InferWire(*served, 2, 2).ok());
}

TEST(BatchingServedModelTest, DestructionFailsQueuedRequestsWithUnavailable) {
  auto model = std::make_shared<FakeModel>(absl::Milliseconds(300));
  auto served = Serve(inference::ModelConfig(), model);
  std::future<InferenceResult> running = SendRows(*served, 1, 2, 0);
  WaitUntil([&] { return model->forwards_started() == 1; });
  std::future<InferenceResult> queued = SendRows(*served, 1, 2, 0);
  served.reset();  // Waits for the running forward.
  EXPECT_TRUE(running.get().outputs.ok());
  EXPECT_EQ(queued.get().outputs.status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(BatchingServedModelTest, MayBeDestroyedFromItsOwnCallback) {
  std::shared_ptr<BatchingServedModel> served =
      Serve(inference::ModelConfig(), std::make_shared<FakeModel>());
  std::weak_ptr<BatchingServedModel> watch = served;
  absl::Notification finished;
  BatchingServedModel* raw = served.get();
  raw->Enqueue(RowsRequest(*raw, 1, 2, 0),
               [owner = std::move(served), &finished](InferenceResult) mutable {
                 owner.reset();  // The last reference, on a worker thread.
                 finished.Notify();
               });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
  WaitUntil([&] { return watch.expired(); });
}

TEST(BatchingServedModelTest, AttributesForwardAllocationsToTheModel) {
  ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  auto served = Serve(inference::ModelConfig(), std::make_shared<FakeModel>(),
                      TrackedModelId::Register("fake"));
  constexpr int kWidth = 1 << 18;  // 1 MiB of f32 per output row.
  InferenceResult result = SendRows(*served, 1, kWidth, 1).get();
  ASSERT_TRUE(result.outputs.ok());
  EXPECT_GE(served->tracked_bytes(), int64_t{kWidth} * 4);
  result = InferenceResult();  // Frees the outputs made by the forward,
  // once the worker has let go of the batch's too.
  WaitUntil([&] { return served->tracked_bytes() < int64_t{kWidth} * 4; });
}

TEST(InstanceCountTest, SumsTheGroupsEachCountingAtLeastOne) {
  inference::ModelConfig config;
  EXPECT_EQ(InstanceCount(config), 1);
  config.add_instance_group()->set_count(3);
  config.add_instance_group();  // count 0 counts as 1
  EXPECT_EQ(InstanceCount(config), 4);
}

TEST(TrackedModelIdTest, IdsAreUniquePerRegistration) {
  ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  std::unique_ptr<TrackedModelId> first = TrackedModelId::Register("m");
  std::unique_ptr<TrackedModelId> second = TrackedModelId::Register("m");
  EXPECT_NE(first->id(), second->id());
  const std::string id = first->id();
  first.reset();
  EXPECT_FALSE(casting::TrackingAllocator::Installed()->GetModelUsage(id).ok());
}

}  // namespace
}  // namespace castserve
