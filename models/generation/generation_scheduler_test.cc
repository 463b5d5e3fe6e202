#include "models/generation/generation_scheduler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "casting/casting_policy.h"
#include "casting/memory/tracking_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "platform/json_parser.h"
#include "platform/test_util/fake_clock.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;
using Stop = GenerationResult::Stop;

// One case of a generation reference file
// (tools/gen_generation_references.py).
struct ReferenceCase {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 0;
  std::vector<int64_t> eos_token_ids;
  std::vector<int64_t> generated;
};

std::vector<ReferenceCase> ReadReference(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto json = platform::ParseJson(text.str());
  EXPECT_TRUE(json.ok()) << path << ": " << json.status();
  std::vector<ReferenceCase> cases;
  if (!json.ok()) return cases;
  for (const auto& item : json->at("cases")) {
    cases.push_back({item.at("prompt").get<std::vector<int64_t>>(),
                     item.at("max_new_tokens").get<int64_t>(),
                     item.at("eos_token_ids").get<std::vector<int64_t>>(),
                     item.at("generated").get<std::vector<int64_t>>()});
  }
  return cases;
}

std::shared_ptr<Model> Load(const std::string& folder,
                            const WeightPolicyOptions& options = {}) {
  auto model = LoadHfModel(folder, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::shared_ptr<Model>(*std::move(model)) : nullptr;
}

// What happened to one submitted sequence.
struct Outcome {
  absl::Notification done;
  absl::StatusOr<GenerationResult> result = absl::UnknownError("not done");
  std::vector<int64_t> streamed;  // on_token's, in order.

  bool Wait() {
    return done.WaitForNotificationWithTimeout(absl::Seconds(120));
  }
};
using OutcomePtr = std::shared_ptr<Outcome>;

GenerationOptions Options(int64_t max_new_tokens,
                          const std::vector<int64_t>& eos = {}) {
  GenerationOptions options;
  options.max_new_tokens = max_new_tokens;
  options.eos_token_ids = eos;
  return options;
}

// A request for `prompt` and `options`, checked against `model` (a test's
// requests are good ones: a failed check ends the test).
SequenceRequest Request(const Model& model, const std::vector<int64_t>& prompt,
                        const GenerationOptions& options) {
  auto checked = CheckGenerationRequest(model, prompt, options);
  EXPECT_TRUE(checked.ok()) << checked.status();
  return SequenceRequest(*std::move(checked));
}

SequenceRequest Request(const Model& model, const std::vector<int64_t>& prompt,
                        int64_t max_new_tokens,
                        const std::vector<int64_t>& eos = {}) {
  return Request(model, prompt, Options(max_new_tokens, eos));
}

// Submits `request`, recording its tokens and result in the Outcome (after
// the request's own on_token, whose answer is kept).
OutcomePtr Submit(GenerationScheduler& scheduler, SequenceRequest request) {
  auto outcome = std::make_shared<Outcome>();
  auto on_token = std::move(request.on_token);
  request.on_token = [outcome, on_token](int64_t token) {
    outcome->streamed.push_back(token);
    return on_token ? on_token(token) : true;
  };
  request.on_done = [outcome](absl::StatusOr<GenerationResult> result) {
    outcome->result = std::move(result);
    outcome->done.Notify();
  };
  scheduler.Submit(std::move(request));
  return outcome;
}

std::unique_ptr<GenerationScheduler> MakeScheduler(
    const Model& model, const SchedulerOptions& options) {
  auto scheduler = GenerationScheduler::Create(model, options);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return scheduler.ok() ? *std::move(scheduler) : nullptr;
}

SchedulerOptions Roomy() {
  SchedulerOptions options;
  options.pool_bytes = 8 << 20;
  return options;
}

// Bytes of one block of `block_tokens` tokens of `model`'s cache.
int64_t BlockBytes(const Model& model, int64_t block_tokens) {
  const KvCacheShape shape = model.incremental_decoder()->kv_cache_shape();
  return 2 * shape.layers * shape.kv_heads * block_tokens * shape.head_dim *
         static_cast<int64_t>(shape.options.dtype().itemsize());
}

void ExpectIdle(const GenerationScheduler& scheduler) {
  const SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.kv_bytes_in_use, 0);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
}

// Runs `cases` concurrently through `scheduler` and expects each reference.
void ExpectReferences(const Model& model, GenerationScheduler& scheduler,
                      const std::vector<ReferenceCase>& cases) {
  std::vector<OutcomePtr> outcomes;
  for (const ReferenceCase& c : cases) {
    outcomes.push_back(
        Submit(scheduler,
               Request(model, c.prompt, c.max_new_tokens, c.eos_token_ids)));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i]->Wait()) << i;
    ASSERT_TRUE(outcomes[i]->result.ok()) << outcomes[i]->result.status();
    EXPECT_EQ(outcomes[i]->result->tokens, cases[i].generated)
        << "case " << i << ", prompt of " << cases[i].prompt.size();
    EXPECT_EQ(outcomes[i]->streamed, cases[i].generated) << i;
    EXPECT_EQ(outcomes[i]->result->stop,
              cases[i].eos_token_ids.empty() ? Stop::kMaxNewTokens : Stop::kEos)
        << i;
    EXPECT_GT(outcomes[i]->result->kv_cache_bytes, 0);
  }
}

class SchedulerFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  }
  std::string folder() const { return "models/testdata/" + GetParam(); }
};

TEST_P(SchedulerFixtureTest, ConcurrentGreedyEqualsTransformers) {
  std::shared_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  auto scheduler = MakeScheduler(*model, Roomy());
  ASSERT_NE(scheduler, nullptr);
  ExpectReferences(*model, *scheduler,
                   ReadReference(folder() + "/generation_reference.json"));
  ExpectIdle(*scheduler);
  EXPECT_GT(scheduler->stats().kv_bytes_peak, 0);
}

TEST_P(SchedulerFixtureTest, BatchOfDifferentLengthsEqualsBatchedTransformers) {
  std::shared_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  const std::vector<ReferenceCase> cases =
      ReadReference(folder() + "/generation_batch_reference.json");
  ASSERT_EQ(cases.size(), 5u);
  auto scheduler = MakeScheduler(*model, Roomy());
  ASSERT_NE(scheduler, nullptr);
  ExpectReferences(*model, *scheduler, cases);
  ExpectIdle(*scheduler);
}

TEST_P(SchedulerFixtureTest, PreemptedSequencesStillEqualTransformers) {
  // 16 blocks of 4 tokens: the three sequences join (prompts of 5, 19 and
  // 5 tokens) but cannot all grow to 36, 50 and 36 tokens: the newest are
  // preempted and recompute their cache when they join again.
  std::shared_ptr<Model> model = Load(folder());
  ASSERT_NE(model, nullptr);
  SchedulerOptions options;
  options.block_tokens = 4;
  options.pool_bytes = 16 * BlockBytes(*model, 4);
  auto scheduler = MakeScheduler(*model, options);
  ASSERT_NE(scheduler, nullptr);
  ExpectReferences(*model, *scheduler,
                   ReadReference(folder() + "/generation_reference.json"));
  ExpectIdle(*scheduler);
  EXPECT_EQ(scheduler->stats().kv_bytes_peak, options.pool_bytes);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SchedulerFixtureTest,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3",
                                           "gemma3_text", "phi3"));

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  }
  void SetUp() override {
    model_ = Load(kFolder);
    ASSERT_NE(model_, nullptr);
    cases_ = ReadReference(std::string(kFolder) + "/generation_reference.json");
  }

  static constexpr const char* kFolder = "models/testdata/llama";
  std::shared_ptr<Model> model_;
  std::vector<ReferenceCase> cases_;
};

SequenceRequest Sampled(const Model& model, const std::vector<int64_t>& prompt,
                        uint64_t seed) {
  GenerationOptions options = Options(24);
  options.sampling.temperature = 1.2;
  options.sampling.top_k = 40;
  options.sampling.seed = seed;
  return Request(model, prompt, options);
}

TEST_F(SchedulerTest, SeededSamplingDoesNotDependOnTheBatch) {
  auto scheduler = MakeScheduler(*model_, Roomy());
  ASSERT_NE(scheduler, nullptr);
  const std::vector<int64_t> prompt = cases_[1].prompt;
  OutcomePtr alone = Submit(*scheduler, Sampled(*model_, prompt, 42));
  ASSERT_TRUE(alone->Wait());
  ASSERT_TRUE(alone->result.ok()) << alone->result.status();
  // Generate draws the same (one sequence, its own seed).
  auto generated = Generate(*model_, Sampled(*model_, prompt, 42).generation);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ(alone->result->tokens, generated->tokens);
  // With 7 others of other prompts and seeds, some joining with it.
  std::vector<OutcomePtr> others;
  for (uint64_t i = 0; i < 4; ++i) {
    others.push_back(
        Submit(*scheduler,
               Sampled(*model_, std::vector<int64_t>(3 + i, 10 + i), 100 + i)));
  }
  OutcomePtr crowded = Submit(*scheduler, Sampled(*model_, prompt, 42));
  for (uint64_t i = 4; i < 7; ++i) {
    others.push_back(
        Submit(*scheduler, Sampled(*model_, cases_[0].prompt, 100 + i)));
  }
  ASSERT_TRUE(crowded->Wait());
  ASSERT_TRUE(crowded->result.ok()) << crowded->result.status();
  EXPECT_EQ(crowded->result->tokens, alone->result->tokens);
  for (const OutcomePtr& other : others) {
    ASSERT_TRUE(other->Wait());
    EXPECT_TRUE(other->result.ok()) << other->result.status();
  }
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, NewcomerWaitsForBlocksThenRuns) {
  // Two blocks of 4 tokens: A (prompt 5, 3 new tokens) holds both; B must
  // wait until A has finished and given them back.
  SchedulerOptions options;
  options.block_tokens = 4;
  options.pool_bytes = 2 * BlockBytes(*model_, 4);
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  absl::Mutex mu;
  std::vector<std::string> events;
  auto record = [&](const std::string& event) {
    absl::MutexLock lock(&mu);
    events.push_back(event);
  };
  absl::Notification b_submitted;
  SequenceRequest a = Request(*model_, cases_[0].prompt, 3);
  a.on_token = [&](int64_t) {
    // A's first token comes after B was queued.
    b_submitted.WaitForNotificationWithTimeout(absl::Seconds(30));
    record("A token");
    return true;
  };
  SequenceRequest b = Request(*model_, {7, 8, 9}, 4);
  b.on_token = [&](int64_t) {
    record("B token");
    return true;
  };
  OutcomePtr a_outcome = Submit(*scheduler, std::move(a));
  OutcomePtr b_outcome = Submit(*scheduler, std::move(b));
  b_submitted.Notify();
  ASSERT_TRUE(a_outcome->Wait());
  ASSERT_TRUE(b_outcome->Wait());
  ASSERT_TRUE(a_outcome->result.ok()) << a_outcome->result.status();
  ASSERT_TRUE(b_outcome->result.ok()) << b_outcome->result.status();
  EXPECT_EQ(events, (std::vector<std::string>{"A token", "A token", "A token",
                                              "B token", "B token", "B token",
                                              "B token"}));
  auto alone = Generate(*model_, Request(*model_, {7, 8, 9}, 4).generation);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(b_outcome->result->tokens, alone->tokens);
  EXPECT_EQ(scheduler->stats().kv_bytes_peak, options.pool_bytes);
  ExpectIdle(*scheduler);
}

// A sequence that runs until `cancel` is set (or `max_new_tokens`, slowly).
SequenceRequest Endless(const Model& model, const std::vector<int64_t>& prompt,
                        const std::shared_ptr<std::atomic<bool>>& cancel,
                        int64_t max_new_tokens = 120) {
  SequenceRequest request = Request(model, prompt, max_new_tokens);
  request.is_cancelled = [cancel] {
    // Polled once per step: each step of it takes >= 1 ms, all >= 120 ms.
    absl::SleepFor(absl::Milliseconds(1));
    return cancel->load();
  };
  return request;
}

TEST_F(SchedulerTest, FullWaitingLineRefusesAtOnce) {
  SchedulerOptions options = Roomy();
  options.max_running = 1;
  options.max_waiting = 1;
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  OutcomePtr a = Submit(*scheduler, Endless(*model_, {3, 4}, cancel));
  OutcomePtr b = Submit(*scheduler, Request(*model_, {5, 6}, 4));
  OutcomePtr c = Submit(*scheduler, Request(*model_, {5, 6}, 4));
  ASSERT_TRUE(c->done.HasBeenNotified());  // Inline.
  EXPECT_EQ(c->result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c->result.status().message(), HasSubstr("queue is full"));
  cancel->store(true);
  ASSERT_TRUE(a->Wait());
  EXPECT_EQ(a->result.status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(b->Wait());
  EXPECT_TRUE(b->result.ok()) << b->result.status();
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, DeadlineWhileWaitingFreesEverything) {
  SchedulerOptions options = Roomy();
  options.max_running = 1;
  platform::test_util::FakeClock clock;
  options.clock = &clock;
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  absl::Notification a_started;
  SequenceRequest endless = Endless(*model_, {3, 4}, cancel);
  endless.on_token = [&a_started](int64_t) {
    if (!a_started.HasBeenNotified()) a_started.Notify();
    return true;
  };
  OutcomePtr a = Submit(*scheduler, std::move(endless));
  ASSERT_TRUE(a_started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  SequenceRequest late = Request(*model_, {5, 6}, 4);
  late.deadline = clock.Now() + absl::Milliseconds(20);
  OutcomePtr b = Submit(*scheduler, std::move(late));
  // A runs until cancelled: B, waiting behind it, ends only by its deadline.
  clock.Advance(absl::Milliseconds(20));
  ASSERT_TRUE(b->Wait());
  EXPECT_EQ(b->result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(b->streamed.empty());
  EXPECT_FALSE(a->done.HasBeenNotified());
  cancel->store(true);
  ASSERT_TRUE(a->Wait());
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, CancellationGivesTheBlocksBack) {
  const std::string tag = "scheduler-test-cancel";
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  ASSERT_TRUE(allocator->RegisterModel(tag).ok());
  SchedulerOptions options = Roomy();
  options.model_tag = tag;
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  SequenceRequest request = Endless(*model_, cases_[0].prompt, cancel);
  request.on_token = [cancel, seen = 0](int64_t) mutable {
    if (++seen == 3) cancel->store(true);
    return true;
  };
  OutcomePtr outcome = Submit(*scheduler, std::move(request));
  ASSERT_TRUE(outcome->Wait());
  EXPECT_EQ(outcome->result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(outcome->streamed.size(), 3u);
  ExpectIdle(*scheduler);
  const SchedulerStats stats = scheduler->stats();
  EXPECT_GT(stats.kv_bytes_peak, 0);
  // The pool's blocks counted for the model (with its weights' compute
  // copies, made on the step thread too), and go with the scheduler.
  auto usage = allocator->GetModelUsage(tag);
  ASSERT_TRUE(usage.ok());
  EXPECT_GE(usage->peak_bytes, stats.kv_bytes_peak);
  const int64_t live = usage->live_bytes;
  EXPECT_GE(live, stats.kv_bytes_peak);
  scheduler.reset();
  usage = allocator->GetModelUsage(tag);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(live - usage->live_bytes, stats.kv_bytes_peak);
  ASSERT_TRUE(allocator->UnregisterModel(tag).ok());
}

TEST_F(SchedulerTest, SequencesBeyondThePoolAreResourceExhausted) {
  SchedulerOptions options;
  options.block_tokens = 4;
  options.pool_bytes = 2 * BlockBytes(*model_, 4);
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  // The prompt and its first new token need 3 blocks.
  OutcomePtr big =
      Submit(*scheduler, Request(*model_, std::vector<int64_t>(8, 3), 1));
  ASSERT_TRUE(big->done.HasBeenNotified());
  EXPECT_EQ(big->result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big->result.status().message(), HasSubstr("needs 3 KV blocks"));
  // One that outgrows the pool alone fails when it does.
  OutcomePtr grows = Submit(*scheduler, Request(*model_, {3, 4, 5}, 20));
  ASSERT_TRUE(grows->Wait());
  EXPECT_EQ(grows->result.status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(grows->streamed.size(), 6u);  // 3 + 5 tokens fill 2 blocks.
  // The request's own checks are CheckGenerationRequest's
  // (generation_test.cc); one checked against another model is refused.
  auto other = CheckGenerationRequest(/*vocab_size=*/999, /*max_positions=*/64,
                                      {3}, Options(1));
  ASSERT_TRUE(other.ok()) << other.status();
  OutcomePtr foreign = Submit(*scheduler, SequenceRequest(*std::move(other)));
  ASSERT_TRUE(foreign->done.HasBeenNotified());
  EXPECT_EQ(foreign->result.status().code(), absl::StatusCode::kInternal);
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, OnTokenFalseStopsTheSequence) {
  auto scheduler = MakeScheduler(*model_, Roomy());
  ASSERT_NE(scheduler, nullptr);
  const ReferenceCase& c = cases_[0];
  SequenceRequest request = Request(*model_, c.prompt, c.max_new_tokens);
  request.on_token = [seen = 0](int64_t) mutable { return ++seen < 3; };
  OutcomePtr outcome = Submit(*scheduler, std::move(request));
  ASSERT_TRUE(outcome->Wait());
  ASSERT_TRUE(outcome->result.ok()) << outcome->result.status();
  EXPECT_EQ(outcome->result->stop, Stop::kStoppedByCaller);
  EXPECT_EQ(outcome->result->tokens,
            std::vector<int64_t>(c.generated.begin(), c.generated.begin() + 3));
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, StopEndsEverySequenceWithUnavailable) {
  SchedulerOptions options = Roomy();
  options.max_running = 2;
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  auto never = std::make_shared<std::atomic<bool>>(false);
  absl::Notification started;
  std::vector<OutcomePtr> outcomes;
  for (int i = 0; i < 5; ++i) {
    SequenceRequest request =
        Endless(*model_, {3, 4, static_cast<int64_t>(5 + i)}, never);
    request.on_token = [&started](int64_t) {
      if (!started.HasBeenNotified()) started.Notify();
      return true;
    };
    outcomes.push_back(Submit(*scheduler, std::move(request)));
  }
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  scheduler->Stop();
  for (const OutcomePtr& outcome : outcomes) {
    ASSERT_TRUE(outcome->done.HasBeenNotified());
    EXPECT_EQ(outcome->result.status().code(), absl::StatusCode::kUnavailable);
  }
  OutcomePtr after = Submit(*scheduler, Request(*model_, {3}, 2));
  ASSERT_TRUE(after->done.HasBeenNotified());
  EXPECT_EQ(after->result.status().code(), absl::StatusCode::kUnavailable);
  scheduler->Stop();  // Idempotent.
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, BadOptionsAreInvalidArgument) {
  auto code = [&](auto field, int64_t value) {
    SchedulerOptions options = Roomy();
    options.*field = value;
    return GenerationScheduler::Create(*model_, options).status().code();
  };
  EXPECT_EQ(code(&SchedulerOptions::pool_bytes, 0),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(&SchedulerOptions::pool_bytes, BlockBytes(*model_, 16) - 1),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(&SchedulerOptions::block_tokens, 0),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(&SchedulerOptions::max_running, 0),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(&SchedulerOptions::max_waiting, -1),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(&SchedulerOptions::max_waiting, 0), absl::StatusCode::kOk);
}

WeightPolicyOptions Fp8TransientPrefetch() {
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = casting::ElementType::kF8E4M3FN;
  policy.scaling = casting::Scaling::kPerRow;
  policy.compute_dtype = casting::ElementType::kF32;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  options.prefetch = true;
  return options;
}

TEST_F(SchedulerTest, LayerwiseCastingBatchedEqualsSequential) {
  std::shared_ptr<Model> model = Load(kFolder, Fp8TransientPrefetch());
  ASSERT_NE(model, nullptr);
  std::vector<ReferenceCase> cases = cases_;
  for (const ReferenceCase& c : ReadReference(
           std::string(kFolder) + "/generation_batch_reference.json")) {
    cases.push_back(c);
  }
  auto scheduler = MakeScheduler(*model, Roomy());
  ASSERT_NE(scheduler, nullptr);
  std::vector<OutcomePtr> outcomes;
  for (const ReferenceCase& c : cases) {
    outcomes.push_back(
        Submit(*scheduler,
               Request(*model, c.prompt, c.max_new_tokens, c.eos_token_ids)));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    auto sequential = Generate(
        *model, Request(*model, cases[i].prompt, cases[i].max_new_tokens,
                        cases[i].eos_token_ids)
                    .generation);
    ASSERT_TRUE(sequential.ok()) << sequential.status();
    ASSERT_TRUE(outcomes[i]->Wait());
    ASSERT_TRUE(outcomes[i]->result.ok()) << outcomes[i]->result.status();
    EXPECT_EQ(outcomes[i]->result->tokens, sequential->tokens) << i;
  }
  ExpectIdle(*scheduler);
}

TEST_F(SchedulerTest, EachWeightRunsOncePerStepForTheWholeBatch) {
  std::shared_ptr<Model> model = Load(kFolder, Fp8TransientPrefetch());
  ASSERT_NE(model, nullptr);
  std::atomic<int> q_proj_calls{0};
  std::atomic<int> most_holding{0};
  model->root().Visit([&](Module& module) {
    if (module.weights().empty()) return;
    const bool q_proj = module.name() == "model.layers.0.self_attn.q_proj";
    module.AddPreForwardHook([&, q_proj](const Module&, ForwardContext& ctx) {
      if (q_proj) ++q_proj_calls;
      most_holding = std::max(most_holding.load(), ctx.modules_holding());
    });
  });
  auto scheduler = MakeScheduler(*model, Roomy());
  ASSERT_NE(scheduler, nullptr);
  std::vector<OutcomePtr> outcomes;
  for (int64_t i = 0; i < 4; ++i) {
    outcomes.push_back(Submit(*scheduler, Request(*model, {3, 4 + i, 5}, 8)));
  }
  for (const OutcomePtr& outcome : outcomes) {
    ASSERT_TRUE(outcome->Wait());
    ASSERT_TRUE(outcome->result.ok()) << outcome->result.status();
  }
  // 32 tokens in 8 steps (a late joiner adds at most one step each), not
  // one forward per sequence and token.
  EXPECT_GE(q_proj_calls.load(), 8);
  EXPECT_LE(q_proj_calls.load(), 11);
  // Transient copies: one module's weights at a time.
  EXPECT_LE(most_holding.load(), 1);
}

// Prefix caching (on by default).

std::vector<int64_t> Synthetic(int64_t n, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back((salt + 11 * i) % 200 + 3);
  return ids;
}

// Greedy tokens of `prompt` generated alone, without any cache.
std::vector<int64_t> Alone(const Model& model,
                           const std::vector<int64_t>& prompt,
                           int64_t max_new_tokens) {
  auto generated =
      Generate(model, Request(model, prompt, max_new_tokens).generation);
  EXPECT_TRUE(generated.ok()) << generated.status();
  return generated.ok() ? generated->tokens : std::vector<int64_t>();
}

std::vector<int64_t> Generated(const Model& model,
                               GenerationScheduler& scheduler,
                               const std::vector<int64_t>& prompt,
                               int64_t max_new_tokens) {
  OutcomePtr outcome =
      Submit(scheduler, Request(model, prompt, max_new_tokens));
  EXPECT_TRUE(outcome->Wait());
  EXPECT_TRUE(outcome->result.ok()) << outcome->result.status();
  return outcome->result.ok() ? outcome->result->tokens
                              : std::vector<int64_t>();
}

SchedulerOptions SmallBlocks(const Model& model, int64_t blocks) {
  SchedulerOptions options;
  options.block_tokens = 4;
  options.pool_bytes = blocks * BlockBytes(model, 4);
  return options;
}

TEST_F(SchedulerTest, ReusedPrefixGivesTheSameTokens) {
  auto scheduler = MakeScheduler(*model_, SmallBlocks(*model_, 64));
  ASSERT_NE(scheduler, nullptr);
  const std::vector<int64_t> prompt = Synthetic(14, 1);
  const std::vector<int64_t> expected = Alone(*model_, prompt, 6);
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 6), expected);
  SchedulerStats stats = scheduler->stats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(stats.prefix_cache_miss_tokens, 14);
  // 14 prompt + 5 computed new tokens: 4 full blocks published.
  EXPECT_EQ(stats.prefix_cache_bytes, 4 * BlockBytes(*model_, 4));
  // Again: the 3 whole blocks before the last prompt token are reused.
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 6), expected);
  stats = scheduler->stats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 12);
  EXPECT_EQ(stats.prefix_cache_miss_tokens, 16);
  // Diverging inside the second block: only the first is reused.
  std::vector<int64_t> diverged = prompt;
  diverged[6] = 250;
  EXPECT_EQ(Generated(*model_, *scheduler, diverged, 6),
            Alone(*model_, diverged, 6));
  EXPECT_EQ(scheduler->stats().prefix_cache_hit_tokens, 16);
  ExpectIdle(*scheduler);
}

// Submits Endless(..., 100) and returns once it has streamed two tokens
// (it runs on until `cancel`); null if it did not within a minute.
OutcomePtr SubmitRunning(GenerationScheduler& scheduler, const Model& model,
                         const std::vector<int64_t>& prompt,
                         const std::shared_ptr<std::atomic<bool>>& cancel) {
  auto first_tokens = std::make_shared<absl::Notification>();
  SequenceRequest endless = Endless(model, prompt, cancel, 100);
  endless.on_token = [first_tokens, seen = 0](int64_t) mutable {
    if (++seen == 2) first_tokens->Notify();
    return true;
  };
  OutcomePtr running = Submit(scheduler, std::move(endless));
  if (!first_tokens->WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return nullptr;
  }
  return running;
}

TEST_F(SchedulerTest, ConcurrentSequencesShareBlocksAndCancellationFreesThem) {
  auto scheduler = MakeScheduler(*model_, SmallBlocks(*model_, 64));
  ASSERT_NE(scheduler, nullptr);
  const std::vector<int64_t> prompt = Synthetic(17, 2);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  OutcomePtr running = SubmitRunning(*scheduler, *model_, prompt, cancel);
  ASSERT_NE(running, nullptr);
  // Joins while the first runs: shares its 4 published prompt blocks.
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 5),
            Alone(*model_, prompt, 5));
  EXPECT_EQ(scheduler->stats().prefix_cache_hit_tokens, 16);
  EXPECT_GT(scheduler->stats().kv_bytes_in_use, 0);
  cancel->store(true);
  ASSERT_TRUE(running->Wait());
  EXPECT_EQ(running->result.status().code(), absl::StatusCode::kCancelled);
  // Every hold is given back; the published blocks stay cached.
  ExpectIdle(*scheduler);
  EXPECT_GE(scheduler->stats().prefix_cache_bytes, 4 * BlockBytes(*model_, 4));
}

TEST_F(SchedulerTest, CachedBlocksAreEvictedForLiveSequences) {
  // 6 blocks of 4 tokens.
  auto scheduler = MakeScheduler(*model_, SmallBlocks(*model_, 6));
  ASSERT_NE(scheduler, nullptr);
  const std::vector<int64_t> first = Synthetic(14, 3);
  const std::vector<int64_t> expected = Alone(*model_, first, 2);
  EXPECT_EQ(Generated(*model_, *scheduler, first, 2), expected);
  EXPECT_EQ(scheduler->stats().prefix_cache_bytes, 3 * BlockBytes(*model_, 4));
  // 20 prompt tokens + 1 need all 6 blocks: the cached ones are evicted.
  const std::vector<int64_t> other = Synthetic(20, 4);
  EXPECT_EQ(Generated(*model_, *scheduler, other, 1), Alone(*model_, other, 1));
  const int64_t hits = scheduler->stats().prefix_cache_hit_tokens;
  // The first prompt is computed again, with the same tokens.
  EXPECT_EQ(Generated(*model_, *scheduler, first, 2), expected);
  EXPECT_EQ(scheduler->stats().prefix_cache_hit_tokens, hits);
  ExpectIdle(*scheduler);
  EXPECT_EQ(scheduler->stats().kv_bytes_peak, 6 * BlockBytes(*model_, 4));
}

// Whether the scheduler's allocated KV bytes come down to `bytes` within
// 10 s (the step thread frees given-back blocks at the end of its step).
bool AllocatedBecomes(const GenerationScheduler& scheduler, int64_t bytes) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (scheduler.stats().kv_bytes_allocated != bytes) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST_F(SchedulerTest,
       UnheldBlocksNotKeptAreFreedAndRunningSequencesKeepTheirs) {
  auto scheduler = MakeScheduler(*model_, SmallBlocks(*model_, 64));
  ASSERT_NE(scheduler, nullptr);
  const int64_t block = BlockBytes(*model_, 4);
  const std::vector<int64_t> prompt = Synthetic(14, 5);
  const std::vector<int64_t> expected = Alone(*model_, prompt, 12);
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 12), expected);
  ASSERT_GT(scheduler->stats().prefix_cache_bytes, 0);

  // Asked for between the steps of a running sequence: the cached blocks
  // go, the sequence's own stay, and its tokens are still the reference's.
  const std::vector<int64_t> long_expected = Alone(*model_, prompt, 100);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  OutcomePtr running = SubmitRunning(*scheduler, *model_, prompt, cancel);
  ASSERT_NE(running, nullptr);
  scheduler->KeepUnheldBlocks(false);
  const SchedulerStats during = scheduler->stats();
  EXPECT_GT(during.kv_bytes_in_use, 0);
  EXPECT_EQ(during.kv_bytes_allocated, during.kv_bytes_in_use);
  EXPECT_EQ(during.prefix_cache_bytes, 0);
  cancel->store(true);
  ASSERT_TRUE(running->Wait());
  EXPECT_EQ(running->result.status().code(), absl::StatusCode::kCancelled);
  ASSERT_GE(running->streamed.size(), 2u);
  ASSERT_LE(running->streamed.size(), long_expected.size());
  EXPECT_EQ(
      running->streamed,
      std::vector<int64_t>(long_expected.begin(),
                           long_expected.begin() + running->streamed.size()));

  // The blocks the running sequence gave back afterwards are freed too,
  // and so are a later sequence's, once it ends.
  EXPECT_TRUE(AllocatedBecomes(*scheduler, 0));
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 12), expected);
  EXPECT_TRUE(AllocatedBecomes(*scheduler, 0));
  EXPECT_EQ(scheduler->stats().prefix_cache_bytes, 0);

  // Kept again: the blocks stay for the next sequences (the prefix cache's
  // too).
  scheduler->KeepUnheldBlocks(true);
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 12), expected);
  EXPECT_GE(scheduler->stats().kv_bytes_allocated, 4 * block);
  EXPECT_GT(scheduler->stats().prefix_cache_bytes, 0);
  ExpectIdle(*scheduler);
  scheduler->Stop();
  scheduler->KeepUnheldBlocks(false);  // Returns at once after Stop.
}

TEST_F(SchedulerTest, PrefixCachingOffReusesNothing) {
  SchedulerOptions options = SmallBlocks(*model_, 64);
  options.prefix_caching = false;
  auto scheduler = MakeScheduler(*model_, options);
  ASSERT_NE(scheduler, nullptr);
  const std::vector<int64_t> prompt = Synthetic(14, 1);
  const std::vector<int64_t> expected =
      Generated(*model_, *scheduler, prompt, 4);
  EXPECT_EQ(Generated(*model_, *scheduler, prompt, 4), expected);
  const SchedulerStats stats = scheduler->stats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(stats.prefix_cache_miss_tokens, 0);
  EXPECT_EQ(stats.prefix_cache_bytes, 0);
}

}  // namespace
}  // namespace castserve::models
