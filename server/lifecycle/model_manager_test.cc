#include "server/lifecycle/model_manager.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "casting/memory/footprint.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"
#include "platform/test_util/manual_executor.h"
#include "server/lifecycle/model_repository.h"
#include "server/lifecycle/served_model.h"
#include "server/test_util/model_manager_fixture.h"
#include "server/test_util/sized_model_factory.h"

namespace castserve {
namespace {

namespace fs = std::filesystem;

using testing::SizedModelFactory;
using testing::SizedServedModel;
using Fixture = testing::ModelManagerFixture;

std::string Config(int64_t bytes, bool first_request = false,
                   bool grow = false) {
  return absl::StrCat(
      first_request ? "load_policy: LOAD_POLICY_FIRST_REQUEST\n" : "",
      "parameters { key: \"bytes\" value { string_value: \"", bytes, "\" } }\n",
      grow ? "parameters { key: \"grow\" value { string_value: \"\" } }\n"
           : "");
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// `pending` requests in flight on the READY model `name`, held by no one
// but the manager: what the test keeps is a weak reference (to the model,
// not to the request's hold GetReady hands out).
std::weak_ptr<ServedModel> WithRequestsInFlight(Fixture& fixture,
                                                const std::string& name,
                                                int pending) {
  std::shared_ptr<ServedModel> model =
      *fixture.manager().GetReady(name, "", Soon());
  static_cast<SizedServedModel*>(model.get())->set_pending(pending);
  for (const auto& [ready_name, ready] : fixture.manager().ReadyModels()) {
    if (ready_name == name) return ready;
  }
  return {};
}

// Unload(name) on a thread of its own; `unloaded` once it returned OK.
struct BackgroundUnload {
  BackgroundUnload(Fixture& fixture, const std::string& name)
      : thread([this, &fixture, name] {
          EXPECT_TRUE(fixture.manager().Unload(name).ok());
          unloaded.Notify();
        }) {}
  ~BackgroundUnload() {
    if (thread.joinable()) thread.join();
  }
  absl::Notification unloaded;
  std::thread thread;
};

inference::ModelConfig ConfigWithParameter(const std::string& key,
                                           const std::string& value) {
  inference::ModelConfig config;
  (*config.mutable_parameters())[key].set_string_value(value);
  return config;
}

TEST(ModelManagerTest, StartupLoadsStartupModelsAndExplainsTheOthers) {
  Fixture fixture;
  fixture.AddModel("eager", Config(100));
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.AddModel("broken", "max_batch_size: \"eight\"\n");
  fixture.manager().LoadStartupModels();

  const std::vector<ModelStatus> index = fixture.manager().Index();
  ASSERT_EQ(index.size(), 3u);
  EXPECT_EQ(index[0].name, "broken");
  EXPECT_EQ(index[0].state, ModelState::kUnavailable);
  EXPECT_NE(index[0].reason.find("config.pbtxt"), std::string::npos)
      << index[0].reason;
  EXPECT_EQ(index[1].name, "eager");
  EXPECT_EQ(index[1].state, ModelState::kReady);
  EXPECT_EQ(index[1].reason, "");
  EXPECT_EQ(index[2].name, "lazy");
  EXPECT_EQ(index[2].state, ModelState::kUnavailable);
  EXPECT_NE(index[2].reason.find("first request"), std::string::npos);
  EXPECT_EQ(fixture.factory().creates(), 1);
  EXPECT_EQ(fixture.manager().GetReady("broken", "", Soon()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ModelManagerTest, FirstRequestLoadsTheModel) {
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.manager().LoadStartupModels();
  EXPECT_EQ(fixture.factory().creates(), 0);
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      fixture.manager().GetReady("lazy", "1", Soon());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(fixture.StateOf("lazy"), ModelState::kReady);
  EXPECT_EQ(fixture.manager().ReadyModels().size(), 1u);
}

TEST(ModelManagerTest, FirstRequestWaitIsBoundedByTheDeadline) {
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.factory().Gate();
  const absl::Time start = absl::Now();
  EXPECT_EQ(fixture.manager()
                .GetReady("lazy", "", start + absl::Milliseconds(50))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(fixture.StateOf("lazy"), ModelState::kLoading);
  fixture.factory().Open();
  EXPECT_TRUE(fixture.manager().GetReady("lazy", "", Soon()).ok());
  EXPECT_EQ(fixture.factory().creates(), 1);  // The load went on.
}

TEST(ModelManagerTest, FirstRequestLoadRunsOnTheExecutor) {
  platform::test_util::ManualExecutor executor;
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.set_executor(&executor);
  // The load is scheduled, not run by the caller: the wait times out.
  EXPECT_EQ(fixture.manager()
                .GetReady("lazy", "", absl::Now() + absl::Milliseconds(20))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(executor.pending(), 1);
  EXPECT_EQ(fixture.factory().creates(), 0);
  EXPECT_EQ(executor.RunPending(), 1);
  EXPECT_EQ(fixture.StateOf("lazy"), ModelState::kReady);
  EXPECT_TRUE(fixture.manager().GetReady("lazy", "", Soon()).ok());
  EXPECT_EQ(executor.pending(), 0);  // READY: nothing more to schedule.
}

TEST(ModelManagerTest, ConcurrentCallersShareOneLoad) {
  Fixture fixture;
  fixture.AddModel("lazy", Config(100, /*first_request=*/true));
  fixture.factory().Gate();
  ModelManager& manager = fixture.manager();
  std::vector<std::shared_ptr<ServedModel>> got(8);
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&, i] {
      absl::StatusOr<std::shared_ptr<ServedModel>> model =
          manager.GetReady("lazy", "", Soon());
      if (model.ok()) got[i] = *model;
    });
  }
  fixture.factory().AwaitWaiting(1);
  absl::SleepFor(absl::Milliseconds(20));
  fixture.factory().Open();
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(fixture.factory().creates(), 1);
  for (const auto& model : got) {
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model, got[0]);
  }
}

TEST(ModelManagerTest, ReloadSwapsInTheNewModelOnlyOnceReady) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  std::shared_ptr<ServedModel> old_model =
      *fixture.manager().GetReady("m", "", Soon());

  fixture.factory().Gate();
  absl::Status reloaded;
  std::thread reload([&] {
    reloaded = fixture.manager().Load("m", ConfigWithParameter("bytes", "7"));
  });
  fixture.factory().AwaitWaiting(1);
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kReady);
  EXPECT_EQ(*fixture.manager().GetReady("m", "", Soon()), old_model);
  fixture.factory().Open();
  reload.join();
  ASSERT_TRUE(reloaded.ok()) << reloaded;
  std::shared_ptr<ServedModel> new_model =
      *fixture.manager().GetReady("m", "", Soon());
  EXPECT_NE(new_model, old_model);
  EXPECT_EQ(new_model->footprint().owned_bytes(), 7);
  old_model.reset();
  EXPECT_EQ(fixture.factory().live_models(), 1);  // The old one is freed.
}

TEST(ModelManagerTest, UnloadCancelsALoadStillRunning) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.factory().Gate();  // The load never finishes on its own.
  absl::Status loaded;
  std::thread load([&] { loaded = fixture.manager().Load("m", std::nullopt); });
  fixture.factory().AwaitWaiting(1);
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kLoading);
  EXPECT_TRUE(fixture.manager().Unload("m").ok());
  load.join();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kCancelled) << loaded;
  EXPECT_EQ(loaded.message(), "the model was unloaded while it was loading");
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "unloaded");
  EXPECT_EQ(fixture.factory().live_models(), 0);
  // The cancellation belonged to that load only.
  fixture.factory().Open();
  EXPECT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kReady);
}

TEST(ModelManagerTest, CancelAllStopsLoadsForGood) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.AddModel("n", Config(100));
  fixture.factory().Gate();
  absl::Status loaded;
  std::thread load([&] { loaded = fixture.manager().Load("m", std::nullopt); });
  fixture.factory().AwaitWaiting(1);
  fixture.manager().CancelAll("the daemon is shutting down");
  load.join();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kCancelled) << loaded;
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "the daemon is shutting down");
  // Later loads are cancelled too.
  EXPECT_EQ(fixture.manager().Load("n", std::nullopt).code(),
            absl::StatusCode::kCancelled);
}

TEST(ModelManagerTest, FailedReloadKeepsTheLoadedModel) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  std::shared_ptr<ServedModel> old_model =
      *fixture.manager().GetReady("m", "", Soon());
  const absl::Status reloaded =
      fixture.manager().Load("m", ConfigWithParameter("fail", "bad weights"));
  EXPECT_EQ(reloaded.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kReady);
  EXPECT_EQ(*fixture.manager().GetReady("m", "", Soon()), old_model);
}

TEST(ModelManagerTest, FailedLoadIsUnavailableWithItsReason) {
  Fixture fixture;
  fixture.AddModel(
      "m", "parameters { key: \"fail\" value { string_value: \"no ckpt\" } }");
  fixture.manager().LoadStartupModels();
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "no ckpt");
  const absl::Status status =
      fixture.manager().GetReady("m", "", Soon()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("no ckpt"), absl::string_view::npos);
}

TEST(ModelManagerTest, UnloadWaitsForInFlightRequestsAndFreesTheModel) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  std::weak_ptr<ServedModel> watch = WithRequestsInFlight(fixture, "m", 1);
  auto* fake = static_cast<SizedServedModel*>(watch.lock().get());
  BackgroundUnload unload(fixture, "m");
  const absl::Notification& unloaded = unload.unloaded;
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(unloaded.HasBeenNotified());
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnloading);
  EXPECT_EQ(fixture.manager().GetReady("m", "", absl::Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  fake->set_pending(0);
  unload.thread.join();
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "unloaded");
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(fixture.factory().live_models(), 0);
  EXPECT_EQ(fixture.manager().GetReady("m", "", Soon()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  EXPECT_TRUE(fixture.manager().GetReady("m", "", Soon()).ok());
}

TEST(ModelManagerTest, NamesThatCouldLeaveTheRepositoryAreInvalid) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  for (const std::string& name :
       {std::string("a/b"), std::string(".."), std::string("../m"),
        std::string("m\0x", 3), std::string(""), std::string(".hidden")}) {
    EXPECT_EQ(fixture.manager().Load(name, std::nullopt).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(fixture.manager().Unload(name).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(fixture.manager().GetReady(name, "", Soon()).status().code(),
              absl::StatusCode::kNotFound)
        << name;
  }
  EXPECT_EQ(fixture.factory().creates(), 0);
}

TEST(ModelManagerTest, UnknownModelsAndVersionsAreNotFound) {
  Fixture fixture;
  fixture.AddModel("m", Config(100));
  fixture.manager().LoadStartupModels();
  EXPECT_EQ(fixture.manager().GetReady("nope", "", Soon()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().GetReady("m", "2", Soon()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().Load("nope", std::nullopt).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().Status("nope").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fixture.manager().Unload("nope").code(),
            absl::StatusCode::kNotFound);
}

TEST(ModelManagerTest, EvictsTheLeastRecentlyUsedIdleModelOverBudget) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/250);
  fixture.set_clock(&clock);
  for (const char* name : {"a", "b", "c"}) fixture.AddModel(name, Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  ASSERT_TRUE(fixture.manager().Load("b", std::nullopt).ok());
  clock.Advance(absl::Milliseconds(2));
  ASSERT_TRUE(fixture.manager().GetReady("a", "", Soon()).ok());  // b is LRU.
  ASSERT_TRUE(fixture.manager().Load("c", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady);
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kUnavailable);
  EXPECT_NE(fixture.ReasonOf("b").find("memory budget"), std::string::npos);
  EXPECT_EQ(fixture.StateOf("c"), ModelState::kReady);
  EXPECT_EQ(fixture.factory().live_models(), 2);

  // An evicted model comes back on its next request, evicting the LRU (a).
  ASSERT_TRUE(fixture.manager().GetReady("b", "", Soon()).ok());
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.StateOf("c"), ModelState::kReady);
}

// In `fixture` (a budget of 150 bytes): memory waits end after 50 ms; a
// (100 bytes) is loaded and handed to a request by GetReady, which is
// returned; b (100 bytes) is not loaded.
std::shared_ptr<ServedModel> HoldAWithBToLoad(Fixture& fixture) {
  fixture.set_max_wait_for_memory(absl::Milliseconds(50));
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100));
  EXPECT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  return *fixture.manager().GetReady("a", "", Soon());
}

TEST(ModelManagerTest, ExplicitLoadWaitsForABusyModelUntilItsDeadline) {
  Fixture fixture(/*budget_bytes=*/150);
  std::shared_ptr<ServedModel> a = HoldAWithBToLoad(fixture);
  static_cast<SizedServedModel*>(a.get())->set_pending(1);

  const absl::Status loaded = fixture.manager().Load("b", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(loaded.message(),
            "memory budget exceeded: model b needs 100 bytes, budget 150 "
            "bytes, 100 bytes held: a 100 bytes (1 request in flight); none "
            "became idle before the deadline");
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady);
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kUnavailable);
  EXPECT_NE(fixture.ReasonOf("b").find("memory budget"), std::string::npos);
  EXPECT_EQ(fixture.factory().creates(), 1) << "b was never built";
  EXPECT_LE(fixture.most_accounted_bytes(), 150);
}

TEST(ModelManagerTest, PressureDoesNotUnloadAModelARequestHolds) {
  Fixture fixture(/*budget_bytes=*/150);
  // Got from GetReady, not yet queued: nothing pending, but a request's.
  std::shared_ptr<ServedModel> a = HoldAWithBToLoad(fixture);
  ASSERT_EQ(a->pending_requests(), 0);

  const absl::Status loaded = fixture.manager().Load("b", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(loaded.message().find("a 100 bytes (1 request in flight)"),
            std::string::npos)
      << loaded;
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady);

  a.reset();  // The request ended: now a may go.
  ASSERT_TRUE(fixture.manager().Load("b", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kReady);
  EXPECT_LE(fixture.most_accounted_bytes(), 150);
}

TEST(ModelManagerTest, ModelLargerThanTheBudgetFailsAtOnceBeforeItIsBuilt) {
  Fixture fixture(/*budget_bytes=*/250);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("huge", Config(1000, /*first_request=*/true));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  std::shared_ptr<ServedModel> a = *fixture.manager().GetReady("a", "", Soon());
  static_cast<SizedServedModel*>(a.get())->set_pending(1);  // Busy: no wait.

  const absl::Time start = absl::Now();
  const absl::Status status =
      fixture.manager().GetReady("huge", "", Soon()).status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "failed without waiting";
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("model huge alone needs 1000 bytes"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("budget 250 bytes"), std::string::npos)
      << status;
  EXPECT_EQ(fixture.factory().creates(), 1) << "huge was never built";
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady) << "a was not evicted";
  // An explicit load says the same.
  const absl::Status loaded = fixture.manager().Load("huge", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(loaded.message().find("alone needs"), std::string::npos) << loaded;
}

TEST(ModelManagerTest, NoRequestIsLostWhenABusyModelGoingIdleMakesRoom) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100, /*first_request=*/true, /*grow=*/true));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  // The manager's reference keeps it.
  auto* busy = static_cast<SizedServedModel*>(
      WithRequestsInFlight(fixture, "a", 1).lock().get());

  absl::Notification answered;
  absl::StatusOr<std::shared_ptr<ServedModel>> b;
  std::thread request([&] {
    b = fixture.manager().GetReady("b", "", Soon());
    answered.Notify();
  });
  EXPECT_TRUE(fixture.AwaitReason("b", "waiting for memory"));
  EXPECT_NE(fixture.ReasonOf("b").find("a 100 bytes (1 request in flight)"),
            std::string::npos)
      << fixture.ReasonOf("b");
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kLoading);
  EXPECT_FALSE(answered.HasBeenNotified());
  EXPECT_EQ(fixture.factory().creates(), 1) << "b waits before it is built";
  busy->set_pending(0);
  request.join();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
  EXPECT_NE(fixture.ReasonOf("a").find("evicted"), std::string::npos);
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kReady);
  EXPECT_LE(fixture.factory().held().most(), 150);
  EXPECT_LE(fixture.most_accounted_bytes(), 150);
}

TEST(ModelManagerTest,
     RequestWaitingForMemoryFailsAtItsDeadlineWithTheHolders) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100, /*first_request=*/true));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  std::shared_ptr<ServedModel> a = *fixture.manager().GetReady("a", "", Soon());
  auto* busy = static_cast<SizedServedModel*>(a.get());
  busy->set_pending(2);
  a.reset();  // Requests in flight hold it, not the test.

  const absl::Status status =
      fixture.manager()
          .GetReady("b", "", absl::Now() + absl::Milliseconds(100))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  for (const char* part : {"model b needs 100 bytes", "budget 150 bytes",
                           "a 100 bytes (2 requests in flight)"}) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << part << " in " << status;
  }
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady);
  EXPECT_EQ(fixture.factory().creates(), 1) << "b was never built";

  // Memory is not a lasting failure: b loads on a later request.
  busy->set_pending(0);
  absl::StatusOr<std::shared_ptr<ServedModel>> b =
      fixture.manager().GetReady("b", "", Soon());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
  EXPECT_LE(fixture.most_accounted_bytes(), 150);
}

TEST(ModelManagerTest, UnloadAndShutdownCancelALoadWaitingForMemory) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100));
  fixture.AddModel("c", Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  std::shared_ptr<ServedModel> a = *fixture.manager().GetReady("a", "", Soon());
  static_cast<SizedServedModel*>(a.get())->set_pending(1);

  absl::Status loaded_b;
  std::thread load_b(
      [&] { loaded_b = fixture.manager().Load("b", std::nullopt); });
  EXPECT_TRUE(fixture.AwaitReason("b", "waiting for memory"));
  EXPECT_TRUE(fixture.manager().Unload("b").ok());
  load_b.join();
  EXPECT_EQ(loaded_b.code(), absl::StatusCode::kCancelled) << loaded_b;
  EXPECT_EQ(fixture.ReasonOf("b"), "unloaded");

  absl::Status loaded_c;
  std::thread load_c(
      [&] { loaded_c = fixture.manager().Load("c", std::nullopt); });
  EXPECT_TRUE(fixture.AwaitReason("c", "waiting for memory"));
  fixture.manager().CancelAll("the daemon is shutting down");
  load_c.join();
  EXPECT_EQ(loaded_c.code(), absl::StatusCode::kCancelled) << loaded_c;
  EXPECT_EQ(fixture.factory().creates(), 1);
}

TEST(ModelManagerTest, ConcurrentFirstRequestsToManyGrowingModelsStayInBudget) {
  constexpr int kModels = 24, kThreads = 8, kRequestsPerThread = 60;
  constexpr int64_t kModelBytes = 100, kBudgetBytes = 6 * kModelBytes;
  Fixture fixture(kBudgetBytes);
  for (int i = 0; i < kModels; ++i) {
    fixture.AddModel(absl::StrCat("m", i),
                     Config(kModelBytes, /*first_request=*/true,
                            /*grow=*/true));
  }
  ModelManager& manager = fixture.manager();
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      for (int k = 0; k < kRequestsPerThread; ++k) {
        const std::string name = absl::StrCat("m", (t * 7 + k * 5) % kModels);
        absl::StatusOr<std::shared_ptr<ServedModel>> model =
            manager.GetReady(name, "", absl::Now() + absl::Seconds(60));
        if (!model.ok()) {
          ADD_FAILURE() << name << ": " << model.status();
          ++failures;
          continue;
        }
        absl::Status answered;
        (*model)->Infer({}, [&](absl::Status status) { answered = status; });
        if (!answered.ok()) ++failures;
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(failures, 0);
  // What the models really held, summed at each change, and what the
  // manager counted, at each change of its own accounting.
  EXPECT_GT(fixture.factory().held().most(), 0);
  EXPECT_LE(fixture.factory().held().most(), kBudgetBytes);
  EXPECT_GT(fixture.accounting_notes(), kModels);
  EXPECT_LE(fixture.most_accounted_bytes(), kBudgetBytes);
  EXPECT_GT(fixture.factory().creates(), kModels) << "models were evicted";
}

TEST(ModelManagerTest, ModelThatCannotFitAloneEvictsNothing) {
  Fixture fixture(/*budget_bytes=*/250);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("huge", Config(1000));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  const absl::Status loaded = fixture.manager().Load("huge", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(loaded.message().find("alone needs"), std::string::npos) << loaded;
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady) << "a was not evicted";
  EXPECT_EQ(fixture.factory().live_models(), 1);
}

TEST(ModelManagerTest, ReloadThatCannotFitBesideItsLoadedVersionFailsAtOnce) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.AddModel("a", Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  // The new version (100 bytes) would need 200 with the loaded one, which
  // nothing may evict before the swap: no wait (a minute by default) helps.
  const absl::Time start = absl::Now();
  const absl::Status reloaded = fixture.manager().Load("a", std::nullopt);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "failed without waiting";
  EXPECT_EQ(reloaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reloaded.message(),
            "memory budget exceeded: the reload of model a needs 100 bytes "
            "(its configured footprint) beside the 100 bytes its loaded "
            "version holds until the new one replaces it, more than the whole "
            "budget: budget 150 bytes (--memory-budget-bytes); unload the "
            "model first");
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kReady) << "the old one serves";
  EXPECT_EQ(fixture.factory().creates(), 1) << "the new one was never built";
  // A smaller new version fits beside it.
  ASSERT_TRUE(
      fixture.manager().Load("a", ConfigWithParameter("bytes", "50")).ok());
  EXPECT_EQ(fixture.factory().creates(), 2);
}

TEST(ModelManagerTest, MemoryWaitCapIsSetOnceWhenTheLoadIsClaimed) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/150);
  fixture.set_clock(&clock);
  fixture.set_max_wait_for_memory(absl::Seconds(1));
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  // a stays busy (the manager's reference keeps it): b must wait.
  WithRequestsInFlight(fixture, "a", 1);

  const absl::Time claimed = clock.Now();
  absl::Notification loaded;
  absl::Status loaded_b;
  std::thread load_b([&] {
    loaded_b = fixture.manager().Load("b", std::nullopt);
    loaded.Notify();
  });
  ASSERT_TRUE(fixture.AwaitReason("b", "waiting for memory"));
  // A request that would wait ten minutes for b wakes again and again while
  // the clock moves; the load still waits only until the claim's cap.
  std::thread request([&] {
    EXPECT_FALSE(fixture.manager()
                     .GetReady("b", "", clock.Now() + absl::Minutes(10))
                     .ok());
  });
  for (int step = 0; step < 100 && !loaded.HasBeenNotified(); ++step) {
    clock.Advance(absl::Milliseconds(50));
    absl::SleepFor(absl::Milliseconds(3));  // The waiters see each step.
  }
  ASSERT_TRUE(loaded.WaitForNotificationWithTimeout(absl::Seconds(10)));
  load_b.join();
  EXPECT_EQ(loaded_b.code(), absl::StatusCode::kResourceExhausted) << loaded_b;
  EXPECT_LE(clock.Now() - claimed, absl::Milliseconds(1200))
      << "the cap moved with the waking request";
  request.join();
  EXPECT_EQ(fixture.factory().creates(), 1) << "b was never built";
}

TEST(ModelManagerTest, LoadWaitingForMemoryMeasuresOnlyAfterChanges) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.AddModel("a", Config(100));
  fixture.AddModel("b", Config(100));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  // The manager's reference keeps it.
  auto* busy = static_cast<SizedServedModel*>(
      WithRequestsInFlight(fixture, "a", 1).lock().get());

  absl::Status loaded_b;
  std::thread load_b(
      [&] { loaded_b = fixture.manager().Load("b", std::nullopt); });
  ASSERT_TRUE(fixture.AwaitReason("b", "waiting for memory"));
  const int reads = busy->footprint_reads();
  // About 40 looks for an idle model (every 5 ms), none of them a
  // measurement: nothing changed.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_LE(busy->footprint_reads() - reads, 1);
  busy->set_pending(0);  // Seen by the next look: a is evicted, b loads.
  load_b.join();
  EXPECT_TRUE(loaded_b.ok()) << loaded_b;
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
}

TEST(ModelManagerTest, UnloadDrainEndsAtItsDeadline) {
  platform::test_util::FakeClock clock;
  Fixture fixture;
  fixture.set_clock(&clock);
  fixture.set_max_unload_drain(absl::Seconds(30));
  fixture.AddModel("m", Config(100));
  ASSERT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  // A request that never ends.
  std::weak_ptr<ServedModel> watch = WithRequestsInFlight(fixture, "m", 1);
  BackgroundUnload unload(fixture, "m");
  ASSERT_TRUE(fixture.AwaitReason("m", "waiting for in-flight requests"));
  clock.Advance(absl::Seconds(29));
  EXPECT_FALSE(
      unload.unloaded.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnloading);
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(
      unload.unloaded.WaitForNotificationWithTimeout(absl::Seconds(10)));
  unload.thread.join();
  EXPECT_EQ(fixture.StateOf("m"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.ReasonOf("m"), "unloaded");
  EXPECT_TRUE(watch.expired()) << "no request held a reference";
}

TEST(ModelManagerTest, StateNamesAreTritons) {
  EXPECT_STREQ(ModelStateName(ModelState::kUnavailable), "UNAVAILABLE");
  EXPECT_STREQ(ModelStateName(ModelState::kLoading), "LOADING");
  EXPECT_STREQ(ModelStateName(ModelState::kReady), "READY");
  EXPECT_STREQ(ModelStateName(ModelState::kUnloading), "UNLOADING");
}

}  // namespace
}  // namespace castserve
