#include "server/lifecycle/model_lifecycle.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/test_util/fake_model_manager.h"

namespace castserve {
namespace {

using LoadOutcome = ModelLifecycle::LoadOutcome;

std::shared_ptr<ServedModel> NewModel() {
  return std::make_shared<testing::FakeServedModel>("m");
}

TEST(ModelLifecycleTest, LoadGoesThroughLoadingToReady) {
  ModelLifecycle model;
  EXPECT_EQ(model.state(), ModelState::kUnavailable);
  model.Claim();
  model.StartLoad(std::make_shared<models::Cancellation>());
  EXPECT_EQ(model.state(), ModelState::kLoading);
  EXPECT_EQ(model.reason(), "loading");
  EXPECT_EQ(model.ready(), nullptr);
  std::shared_ptr<ServedModel> created = NewModel();
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  EXPECT_EQ(model.FinishLoad(created, absl::OkStatus(), absl::Now(), &replaced,
                             &replaced_bytes),
            LoadOutcome::kReady);
  EXPECT_EQ(model.state(), ModelState::kReady);
  EXPECT_EQ(model.reason(), "");
  EXPECT_EQ(model.ready(), created);
  EXPECT_FALSE(model.busy());
  EXPECT_EQ(replaced, nullptr);
}

TEST(ModelLifecycleTest, FailedLoadIsUnavailableWithTheReason) {
  ModelLifecycle model;
  model.Claim();
  model.StartLoad(std::make_shared<models::Cancellation>());
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  EXPECT_EQ(model.FinishLoad(nullptr, absl::DataLossError("bad checkpoint"),
                             absl::Now(), &replaced, &replaced_bytes),
            LoadOutcome::kFailed);
  EXPECT_EQ(model.StatusOf("m").state, ModelState::kUnavailable);
  EXPECT_EQ(model.StatusOf("m").reason, "bad checkpoint");
  EXPECT_FALSE(model.busy());
}

TEST(ModelLifecycleTest, ReloadServesTheOldModelUntilTheSwap) {
  ModelLifecycle model;
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  std::shared_ptr<ServedModel> old_model = NewModel();
  model.Claim();
  model.StartLoad(nullptr);
  model.FinishLoad(old_model, absl::OkStatus(), absl::Now(), &replaced,
                   &replaced_bytes);

  model.Claim();
  model.StartLoad(std::make_shared<models::Cancellation>());
  EXPECT_EQ(model.state(), ModelState::kReady);  // Not LOADING: it serves.
  EXPECT_EQ(model.ready(), old_model);
  std::shared_ptr<ServedModel> new_model = NewModel();
  EXPECT_EQ(model.FinishLoad(new_model, absl::OkStatus(), absl::Now(),
                             &replaced, &replaced_bytes),
            LoadOutcome::kReady);
  EXPECT_EQ(model.ready(), new_model);
  EXPECT_EQ(replaced, old_model);  // Handed back, released by the caller.
}

TEST(ModelLifecycleTest, FailedReloadKeepsTheLoadedModel) {
  ModelLifecycle model;
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  std::shared_ptr<ServedModel> old_model = NewModel();
  model.Claim();
  model.StartLoad(nullptr);
  model.FinishLoad(old_model, absl::OkStatus(), absl::Now(), &replaced,
                   &replaced_bytes);
  model.Claim();
  model.StartLoad(nullptr);
  EXPECT_EQ(model.FinishLoad(nullptr, absl::InvalidArgumentError("bad config"),
                             absl::Now(), &replaced, &replaced_bytes),
            LoadOutcome::kKeptLoaded);
  EXPECT_EQ(model.state(), ModelState::kReady);
  EXPECT_EQ(model.ready(), old_model);
}

TEST(ModelLifecycleTest, CancelLoadCancelsOnlyARunningLoad) {
  ModelLifecycle model;
  EXPECT_FALSE(model.CancelLoad("unloaded"));
  auto cancellation = std::make_shared<models::Cancellation>();
  model.Claim();
  model.StartLoad(cancellation);
  EXPECT_TRUE(model.CancelLoad("unloaded"));
  EXPECT_TRUE(cancellation->cancelled());
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  model.FinishLoad(nullptr, absl::CancelledError("unloaded"), absl::Now(),
                   &replaced, &replaced_bytes);
  EXPECT_FALSE(model.CancelLoad("again"));
}

TEST(ModelLifecycleTest, UnloadDrainsThroughUnloading) {
  ModelLifecycle model;
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  std::shared_ptr<ServedModel> loaded = NewModel();
  model.Claim();
  model.StartLoad(nullptr);
  model.FinishLoad(loaded, absl::OkStatus(), absl::Now(), &replaced,
                   &replaced_bytes);
  model.Claim();
  EXPECT_EQ(model.StartUnload(), loaded);
  EXPECT_EQ(model.state(), ModelState::kUnloading);
  EXPECT_EQ(model.ready(), nullptr);  // No new request reaches it.
  model.FinishUnload();
  EXPECT_EQ(model.state(), ModelState::kUnavailable);
  EXPECT_EQ(model.reason(), "unloaded");
  EXPECT_FALSE(model.busy());
  EXPECT_FALSE(model.loads_on_request());
}

// Loads `created` into `model`: READY.
void LoadInto(ModelLifecycle& model, std::shared_ptr<ServedModel> created) {
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  model.Claim();
  model.StartLoad(nullptr);
  model.FinishLoad(std::move(created), absl::OkStatus(), absl::Now(), &replaced,
                   &replaced_bytes);
}

TEST(ModelLifecycleTest, EvictedModelLoadsAgainOnRequest) {
  ModelLifecycle model;
  LoadInto(model, NewModel());
  EXPECT_TRUE(model.Evictable());
  EXPECT_NE(model.Evict(), nullptr);
  EXPECT_EQ(model.state(), ModelState::kUnavailable);
  EXPECT_TRUE(model.loads_on_request());
  EXPECT_FALSE(model.Evictable());
}

// A request's reference keeps the model from moving; the manager's own
// (a measurement, a metrics scrape) does not.
TEST(ModelLifecycleTest, OnlyARequestsHoldKeepsTheModelFromMoving) {
  ModelLifecycle model;
  LoadInto(model, NewModel());
  EXPECT_TRUE(model.Movable());
  std::shared_ptr<ServedModel> scrape = model.ready();
  EXPECT_TRUE(model.Movable());
  std::shared_ptr<ServedModel> request = model.HoldForRequest();
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request.get(), model.ready().get());
  EXPECT_FALSE(model.Movable());
  std::shared_ptr<ServedModel> copy = request;  // A callback's copy.
  request.reset();
  EXPECT_FALSE(model.Movable());
  copy.reset();
  EXPECT_TRUE(model.Movable());
  EXPECT_TRUE(model.Evictable());
  // Pressure does not unload a model a request holds, but an explicit
  // unload may: the request's hold keeps the model alive after it.
  std::shared_ptr<ServedModel> held = model.HoldForRequest();
  EXPECT_FALSE(model.Evictable());
  scrape.reset();
  model.Evict();
  EXPECT_EQ(held->config().name(), "m");
  EXPECT_EQ(model.HoldForRequest(), nullptr);
}

TEST(ModelLifecycleTest, BusyModelIsNotEvictableNorRedescribed) {
  ModelLifecycle model;
  EXPECT_TRUE(model.SetNotLoaded("not loaded", /*loads_on_request=*/true));
  model.Claim(/*on_request=*/true);
  EXPECT_FALSE(model.loads_on_request());  // Not retried on its own.
  EXPECT_FALSE(model.SetNotLoaded("other", true));
  EXPECT_EQ(model.reason(), "not loaded");
  EXPECT_FALSE(model.Evictable());
}

TEST(ModelLifecycleTest, ReservationPassesToTheLoadedModelAndCountsAsAtLeast) {
  ModelLifecycle model;
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  model.Claim();
  model.StartLoad(nullptr);
  model.ReserveForLoad(1000);
  EXPECT_EQ(model.accounted_bytes(), 1000) << "a load counts its reservation";
  std::shared_ptr<ServedModel> loaded = NewModel();
  model.FinishLoad(loaded, absl::OkStatus(), absl::Now(), &replaced,
                   &replaced_bytes);
  EXPECT_EQ(model.accounted_bytes(), 1000);
  model.SetMeasured(loaded.get(), 400, model.tier_changes());
  EXPECT_EQ(model.accounted_bytes(), 1000) << "measured below the reservation";
  model.SetMeasured(loaded.get(), 1500, model.tier_changes());
  EXPECT_EQ(model.accounted_bytes(), 1500) << "measured above it";
  model.SetMeasured(NewModel().get(), 9999, model.tier_changes());
  EXPECT_EQ(model.accounted_bytes(), 1500) << "another model's measure";
  // Taken before a move began or ended: of a tier the model left.
  const uint64_t before_move = model.tier_changes();
  model.StartMove();
  model.SetMeasured(loaded.get(), 1600, before_move);
  EXPECT_EQ(model.accounted_bytes(), 1500) << "a measure from before the move";
  const uint64_t during_move = model.tier_changes();
  model.FinishMove(/*moved=*/false, casting::WeightTier::kWarm, absl::Now(),
                   /*by_keep_alive=*/false);
  model.SetMeasured(loaded.get(), 1700, during_move);
  EXPECT_EQ(model.accounted_bytes(), 1500) << "a measure across its end";
  model.SetMeasured(loaded.get(), 1600, model.tier_changes());
  EXPECT_EQ(model.accounted_bytes(), 1600) << "a measure since";
  model.SetMeasured(loaded.get(), 1500, model.tier_changes());

  // A reload counts both until the swap, which hands the old bytes over.
  model.Claim();
  model.StartLoad(nullptr);
  model.ReserveForLoad(700);
  EXPECT_EQ(model.accounted_bytes(), 2200);
  model.FinishLoad(NewModel(), absl::OkStatus(), absl::Now(), &replaced,
                   &replaced_bytes);
  EXPECT_EQ(replaced, loaded);
  EXPECT_EQ(replaced_bytes, 1500);
  EXPECT_EQ(model.accounted_bytes(), 700);
  EXPECT_EQ(model.served_bytes(), 700);
  EXPECT_NE(model.Evict(), nullptr);
  EXPECT_EQ(model.accounted_bytes(), 0);
}

TEST(ModelLifecycleTest, OnRequestLoadWithoutMemoryMayStartAgain) {
  ModelLifecycle model;
  std::shared_ptr<ServedModel> replaced;
  int64_t replaced_bytes = 0;
  model.SetNotLoaded("not loaded", /*loads_on_request=*/true);
  model.Claim(/*on_request=*/true);
  model.StartLoad(nullptr);
  model.ExtendLoadDeadline(absl::FromUnixSeconds(20));
  model.ExtendLoadDeadline(absl::FromUnixSeconds(10));
  EXPECT_EQ(model.load_deadline(), absl::FromUnixSeconds(20));
  model.SetWaitingForMemory("waiting for memory: b needs 5 bytes");
  EXPECT_TRUE(model.waiting_for_memory());
  EXPECT_EQ(model.reason(), "waiting for memory: b needs 5 bytes");
  model.MarkLoadRetryable();
  model.FinishLoad(nullptr, absl::ResourceExhaustedError("no memory"),
                   absl::Now(), &replaced, &replaced_bytes);
  EXPECT_FALSE(model.waiting_for_memory());
  EXPECT_EQ(model.failure_code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(model.loads_on_request()) << "memory may free up";

  // Any other failure waits for an explicit load, also one that can never
  // get its memory (a model larger than the budget).
  model.Claim(/*on_request=*/true);
  EXPECT_EQ(model.load_deadline(), absl::InfinitePast()) << "reset by Claim";
  model.StartLoad(nullptr);
  model.FinishLoad(nullptr, absl::ResourceExhaustedError("alone needs"),
                   absl::Now(), &replaced, &replaced_bytes);
  EXPECT_FALSE(model.loads_on_request());
  EXPECT_EQ(model.failure_code(), absl::StatusCode::kResourceExhausted);
  model.Claim();
  model.StartLoad(nullptr);
  model.FinishLoad(nullptr, absl::DataLossError("bad checkpoint"), absl::Now(),
                   &replaced, &replaced_bytes);
  EXPECT_EQ(model.failure_code(), absl::StatusCode::kDataLoss);
}

TEST(ModelLifecycleTest, StateNamesAreTritons) {
  EXPECT_STREQ(ModelStateName(ModelState::kUnavailable), "UNAVAILABLE");
  EXPECT_STREQ(ModelStateName(ModelState::kLoading), "LOADING");
  EXPECT_STREQ(ModelStateName(ModelState::kReady), "READY");
  EXPECT_STREQ(ModelStateName(ModelState::kUnloading), "UNLOADING");
}

TEST(ModelLifecycleTest, LoadDeadlineNeverPassesTheClaimsCap) {
  const absl::Time cap = absl::FromUnixSeconds(1000);
  ModelLifecycle model;
  model.Claim(/*on_request=*/false, cap);
  EXPECT_EQ(model.load_deadline(), absl::InfinitePast());
  model.ExtendLoadDeadline(cap - absl::Seconds(5));
  EXPECT_EQ(model.load_deadline(), cap - absl::Seconds(5));
  model.ExtendLoadDeadline(cap + absl::Minutes(10));  // A patient request.
  EXPECT_EQ(model.load_deadline(), cap);
  model.ExtendLoadDeadline(absl::InfiniteFuture());  // An explicit load.
  EXPECT_EQ(model.load_deadline(), cap);
  model.ExtendLoadDeadline(cap - absl::Seconds(9));  // Never shortened.
  EXPECT_EQ(model.load_deadline(), cap);
}

}  // namespace
}  // namespace castserve
