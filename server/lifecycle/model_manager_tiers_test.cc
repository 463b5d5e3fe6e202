// The ModelManager's memory tiers (model_manager.h): pressure demotes before
// it unloads, promotions reserve, keep_alive, pins and priorities, explicit
// moves, over SizedModelFactory models that hold their tier's bytes.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_clock.h"
#include "server/lifecycle/model_manager.h"
#include "server/metrics/lifecycle_metrics.h"
#include "server/test_util/model_manager_fixture.h"
#include "server/test_util/sized_model_factory.h"

namespace castserve {
namespace {

using casting::WeightTier;
using Fixture = testing::ModelManagerFixture;
using testing::SizedServedModel;

// A model holding `hot` bytes hot, `warm` warm and `cool` cool; `extra`
// is appended (a tiers { } block, a load_policy).
std::string TierConfig(int64_t hot, int64_t warm, int64_t cool,
                       const std::string& extra = "") {
  return absl::StrCat(
      "parameters { key: \"bytes\" value { string_value: \"", hot, "\" } }\n",
      "parameters { key: \"warm_bytes\" value { string_value: \"", warm,
      "\" } }\n", "parameters { key: \"cool_bytes\" value { string_value: \"",
      cool, "\" } }\n", extra);
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

std::optional<WeightTier> TierOf(Fixture& fixture, const std::string& name) {
  absl::StatusOr<ModelStatus> status = fixture.manager().Status(name);
  return status.ok() ? status->tier : std::nullopt;
}

// Returns once `name` is in `tier` (false after 10 s of real time).
bool AwaitTier(Fixture& fixture, const std::string& name, WeightTier tier) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (TierOf(fixture, name) != tier) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// A request on `name`: GetReady, then Infer (the sized model grows back to
// its hot bytes, as a forward builds back).
absl::Status Request(Fixture& fixture, const std::string& name) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      fixture.manager().GetReady(name, "", Soon());
  if (!model.ok()) return model.status();
  absl::Status result;
  (*model)->Infer(InferenceCall{},
                  [&](absl::Status status) { result = std::move(status); });
  return result;
}

TEST(ModelManagerTiersTest,
     PressureDemotesTheLeastRecentlyUsedBeforeUnloading) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/250);
  fixture.set_clock(&clock);
  for (const char* name : {"a", "b", "c"}) {
    fixture.AddModel(
        name,
        TierConfig(100, 40, 10, "load_policy: LOAD_POLICY_FIRST_REQUEST"));
  }
  ASSERT_TRUE(Request(fixture, "a").ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(Request(fixture, "b").ok());
  clock.Advance(absl::Seconds(1));

  ASSERT_TRUE(Request(fixture, "c").ok());
  EXPECT_EQ(TierOf(fixture, "a"), WeightTier::kWarm) << "a was the LRU";
  EXPECT_EQ(TierOf(fixture, "b"), WeightTier::kHot);
  EXPECT_EQ(TierOf(fixture, "c"), WeightTier::kHot);
  EXPECT_EQ(fixture.factory().creates(), 3) << "nothing was unloaded";
  EXPECT_EQ(fixture.factory().held().now(), 240);

  // a's next request promotes it: the bytes back up to hot are reserved
  // first, by demoting the least recently used other model (b).
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(Request(fixture, "a").ok());
  EXPECT_EQ(TierOf(fixture, "a"), WeightTier::kHot);
  EXPECT_EQ(TierOf(fixture, "b"), WeightTier::kWarm);
  EXPECT_EQ(fixture.factory().creates(), 3) << "no load step on promotion";
  EXPECT_LE(fixture.factory().held().most(), 250);
  EXPECT_LE(fixture.most_accounted_bytes(), 250);
}

// A move down lets the model's requests in once it has taken the memory
// out of the weights, not after it has freed it (slow for a large model);
// the bytes still being freed count against the budget until they are.
TEST(ModelManagerTiersTest, ARequestDuringADemotionDoesNotWaitForItsFrees) {
  Fixture fixture(/*budget_bytes=*/1000);
  fixture.AddModel("a", TierConfig(100, 40, 10));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  fixture.factory().frees().Hold();
  std::thread move([&] {
    EXPECT_TRUE(fixture.manager().MoveTo("a", WeightTier::kCool).ok());
  });
  fixture.factory().frees().AwaitWaiting(1);
  EXPECT_EQ(TierOf(fixture, "a"), WeightTier::kCool);
  EXPECT_EQ(fixture.factory().held().now(), 100) << "not freed yet";
  EXPECT_EQ(fixture.accounted_bytes(), 100) << "cool 10 + 90 being freed";

  // The request runs while the frees wait; it promotes the model back to
  // hot, its 90 bytes reserved on top of the 90 not freed yet.
  ASSERT_TRUE(Request(fixture, "a").ok());
  EXPECT_EQ(fixture.factory().held().now(), 190);
  ASSERT_TRUE(AwaitTier(fixture, "a", WeightTier::kHot));

  fixture.factory().frees().Release();
  move.join();
  EXPECT_EQ(fixture.factory().held().now(), 100);
  EXPECT_EQ(fixture.accounted_bytes(), 100) << "the freed 90 no longer count";
}

TEST(ModelManagerTiersTest, CheaperToWakeDemotionsComeFirstThenUnloads) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/200);
  fixture.set_clock(&clock);
  fixture.AddModel("a", TierConfig(100, 40, 10));
  fixture.AddModel("b", TierConfig(100, 40, 10));
  fixture.AddModel("flat", TierConfig(50, 50, 50));
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("b", std::nullopt).ok());
  // 200 held; flat needs 50: a (the LRU) hot -> warm frees 60.
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("flat", std::nullopt).ok());
  EXPECT_EQ(TierOf(fixture, "a"), WeightTier::kWarm);
  EXPECT_EQ(TierOf(fixture, "b"), WeightTier::kHot);

  // A model of 110 needs 100 more (190 held): b hot -> warm (60) before any
  // warm -> cool, then a warm -> cool (30) and b warm -> cool (30); flat
  // cannot be demoted, and is unloaded only if that is not enough.
  fixture.AddModel("big", TierConfig(110, 110, 110));
  ASSERT_TRUE(fixture.manager().Load("big", std::nullopt).ok());
  EXPECT_EQ(TierOf(fixture, "b"), WeightTier::kCool);
  EXPECT_EQ(TierOf(fixture, "a"), WeightTier::kCool);
  EXPECT_EQ(fixture.StateOf("flat"), ModelState::kReady);
  EXPECT_LE(fixture.factory().held().most(), 200);

  // Nothing is left to demote: the next one unloads.
  fixture.AddModel("more", TierConfig(60, 60, 60));
  ASSERT_TRUE(fixture.manager().Load("more", std::nullopt).ok());
  EXPECT_LE(fixture.factory().held().most(), 200);
  EXPECT_LE(fixture.most_accounted_bytes(), 200);
  int unloaded = 0;
  for (const char* name : {"a", "b", "flat"}) {
    unloaded += fixture.StateOf(name) == ModelState::kUnavailable;
  }
  EXPECT_GE(unloaded, 1);
}

// A cool model that counts nothing against the budget stays loaded when
// pressure unloads: unloading it would free nothing, and its next request
// would pay a load instead of a wake.
TEST(ModelManagerTiersTest, PressureNeverUnloadsAModelThatCountsNothing) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/200);
  fixture.set_clock(&clock);
  fixture.AddModel("cool", TierConfig(100, 40, 0));
  for (const char* name : {"b", "c", "d"}) {
    fixture.AddModel(name, TierConfig(100, 100, 100));
  }
  ASSERT_TRUE(fixture.manager().Load("cool", std::nullopt).ok());
  ASSERT_TRUE(fixture.manager().MoveTo("cool", WeightTier::kCool).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("b", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("c", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));

  // 200 held by b and c, nothing left to demote: d's load unloads the least
  // recently used model that holds bytes, b, not the older cool one.
  ASSERT_TRUE(fixture.manager().Load("d", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("b"), ModelState::kUnavailable);
  EXPECT_EQ(fixture.StateOf("cool"), ModelState::kReady);
  EXPECT_EQ(TierOf(fixture, "cool"), WeightTier::kCool);
  EXPECT_EQ(fixture.StateOf("c"), ModelState::kReady);
  EXPECT_LE(fixture.most_accounted_bytes(), 200);

  ASSERT_TRUE(Request(fixture, "cool").ok()) << "woken, not loaded again";
  EXPECT_EQ(fixture.factory().creates(), 4);
}

TEST(ModelManagerTiersTest, LowerPriorityIsDemotedFirst) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/250);
  fixture.set_clock(&clock);
  fixture.AddModel("important",
                   TierConfig(100, 40, 10, "tiers { priority: 5 }"));
  fixture.AddModel("casual", TierConfig(100, 40, 10));
  fixture.AddModel("new", TierConfig(100, 40, 10));
  ASSERT_TRUE(fixture.manager().Load("important", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("casual", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("new", std::nullopt).ok());
  EXPECT_EQ(TierOf(fixture, "important"), WeightTier::kHot)
      << "least recently used, but of higher priority";
  EXPECT_EQ(TierOf(fixture, "casual"), WeightTier::kWarm);
}

// Each model's promotions are timed; pressure weighs how fast a model
// wakes against how long it has been idle (tier_policy.h, PickDemotion).
TEST(ModelManagerTiersTest, PressureDemotesWhatWakesFastestForItsIdleTime) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/250);
  fixture.set_clock(&clock);
  const std::string slow_wake =
      "parameters { key: \"promotion_ms\" value { string_value: \"1000\" } }";
  const std::string fast_wake =
      "parameters { key: \"promotion_ms\" value { string_value: \"10\" } }";
  fixture.AddModel("slow", TierConfig(100, 40, 10, slow_wake));
  fixture.AddModel("fast", TierConfig(100, 40, 10, fast_wake));
  fixture.AddModel("new", TierConfig(100, 40, 10));
  for (const char* name : {"slow", "fast"}) {
    ASSERT_TRUE(fixture.manager().Load(name, std::nullopt).ok());
    ASSERT_TRUE(fixture.manager().MoveTo(name, WeightTier::kCool).ok());
  }
  // Each wakes once: 90 bytes built back in 1 s and in 10 ms.
  ASSERT_TRUE(Request(fixture, "slow").ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(Request(fixture, "fast").ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_EQ(TierOf(fixture, "slow"), WeightTier::kHot);
  ASSERT_EQ(TierOf(fixture, "fast"), WeightTier::kHot);

  // 200 held, "new" needs 100: slow is the least recently used (idle 2 s
  // against 1 s), but fast wakes 100x as fast, so fast is demoted.
  ASSERT_TRUE(fixture.manager().Load("new", std::nullopt).ok());
  EXPECT_EQ(TierOf(fixture, "fast"), WeightTier::kWarm);
  EXPECT_EQ(TierOf(fixture, "slow"), WeightTier::kHot);
  EXPECT_LE(fixture.most_accounted_bytes(), 250);
  // The rates it went by, as /metrics exports them.
  auto snapshot = LifecycleMetrics::Global().snapshot();
  EXPECT_DOUBLE_EQ(snapshot["fast"].wake_rates["cool"], 9000);
  EXPECT_DOUBLE_EQ(snapshot["slow"].wake_rates["cool"], 90);
}

TEST(ModelManagerTiersTest, PinnedModelIsNeitherDemotedBelowItsPinNorUnloaded) {
  Fixture fixture(/*budget_bytes=*/150);
  fixture.set_max_wait_for_memory(absl::Milliseconds(50));
  fixture.AddModel("pinned",
                   TierConfig(100, 40, 10, "tiers { pin: MEMORY_TIER_WARM }"));
  fixture.AddModel("other", TierConfig(100, 100, 100));
  fixture.AddModel("big", TierConfig(120, 120, 120));
  ASSERT_TRUE(fixture.manager().Load("pinned", std::nullopt).ok());
  // Demoted down to its pin to make room.
  ASSERT_TRUE(fixture.manager().Load("other", std::nullopt).ok());
  EXPECT_EQ(TierOf(fixture, "pinned"), WeightTier::kWarm);
  ASSERT_TRUE(fixture.manager().Unload("other").ok());

  // 120 beside the pinned model's warm 40 does not fit, and it is neither
  // demoted to cool nor unloaded for it.
  const absl::Status loaded = fixture.manager().Load("big", std::nullopt);
  EXPECT_EQ(loaded.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(loaded.message().find("pinned warm"), std::string::npos)
      << loaded.message();
  EXPECT_EQ(fixture.StateOf("pinned"), ModelState::kReady);
  EXPECT_EQ(TierOf(fixture, "pinned"), WeightTier::kWarm);

  const absl::Status below =
      fixture.manager().MoveTo("pinned", WeightTier::kCool);
  EXPECT_EQ(below.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(below.message().find("pinned at tier warm"), std::string::npos)
      << below.message();
  EXPECT_LE(fixture.most_accounted_bytes(), 150);
}

TEST(ModelManagerTiersTest, KeepAliveDemotesOneTierPerIdlePeriodDownToThePin) {
  platform::test_util::FakeClock clock;
  Fixture fixture;
  fixture.set_clock(&clock);
  fixture.set_keep_alive(absl::Seconds(30));
  fixture.AddModel("free", TierConfig(100, 40, 10));
  fixture.AddModel("pinned",
                   TierConfig(100, 40, 10, "tiers { pin: MEMORY_TIER_WARM }"));
  fixture.AddModel("own",
                   TierConfig(100, 40, 10, "tiers { keep_alive: \"inf\" }"));
  for (const char* name : {"free", "pinned", "own"}) {
    ASSERT_TRUE(fixture.manager().Load(name, std::nullopt).ok());
  }
  clock.Advance(absl::Seconds(29));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(TierOf(fixture, "free"), WeightTier::kHot);

  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(AwaitTier(fixture, "free", WeightTier::kWarm));
  EXPECT_TRUE(AwaitTier(fixture, "pinned", WeightTier::kWarm));
  // Used now: its idleness starts again.
  ASSERT_TRUE(Request(fixture, "pinned").ok());
  EXPECT_EQ(TierOf(fixture, "pinned"), WeightTier::kHot);

  clock.Advance(absl::Seconds(31));
  EXPECT_TRUE(AwaitTier(fixture, "free", WeightTier::kCool));
  EXPECT_TRUE(AwaitTier(fixture, "pinned", WeightTier::kWarm));
  clock.Advance(absl::Hours(1));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(TierOf(fixture, "pinned"), WeightTier::kWarm) << "its pin";
  EXPECT_EQ(TierOf(fixture, "free"), WeightTier::kCool) << "never unloaded";
  EXPECT_EQ(fixture.StateOf("free"), ModelState::kReady);
  EXPECT_EQ(TierOf(fixture, "own"), WeightTier::kHot) << "keep_alive inf";
}

TEST(ModelManagerTiersTest, KeepAliveDefaultsToNever) {
  platform::test_util::FakeClock clock;
  Fixture fixture;
  fixture.set_clock(&clock);
  fixture.AddModel("m", TierConfig(100, 40, 10));
  ASSERT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  clock.Advance(absl::Hours(24));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(TierOf(fixture, "m"), WeightTier::kHot);
  EXPECT_EQ(ModelManagerOptions().keep_alive, absl::InfiniteDuration());
}

TEST(ModelManagerTiersTest, ExplicitMovesGoDownAndUpWithoutReloading) {
  Fixture fixture(/*budget_bytes=*/1000);
  fixture.AddModel("m", TierConfig(100, 40, 10));
  fixture.AddModel("resident", TierConfig(100, 100, 10));
  ASSERT_TRUE(fixture.manager().Load("m", std::nullopt).ok());
  ASSERT_TRUE(fixture.manager().Load("resident", std::nullopt).ok());

  ASSERT_TRUE(fixture.manager().MoveTo("m", WeightTier::kWarm).ok());
  EXPECT_EQ(TierOf(fixture, "m"), WeightTier::kWarm);
  EXPECT_EQ(fixture.factory().held().now(), 140);
  ASSERT_TRUE(fixture.manager().MoveTo("m", WeightTier::kCool).ok());
  EXPECT_EQ(fixture.factory().held().now(), 110);
  ASSERT_TRUE(fixture.manager().MoveTo("m", WeightTier::kHot).ok());
  EXPECT_EQ(TierOf(fixture, "m"), WeightTier::kHot);
  EXPECT_EQ(fixture.factory().creates(), 2) << "no reload";

  // Warm frees nothing for it: it stays hot.
  ASSERT_TRUE(fixture.manager().MoveTo("resident", WeightTier::kWarm).ok());
  EXPECT_EQ(TierOf(fixture, "resident"), WeightTier::kHot);

  EXPECT_EQ(fixture.manager().MoveTo("nope", WeightTier::kWarm).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(fixture.manager().Unload("m").ok());
  EXPECT_EQ(fixture.manager().MoveTo("m", WeightTier::kWarm).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(TierOf(fixture, "m"), std::nullopt) << "not READY: no tier";
}

TEST(ModelManagerTiersTest, WithTiersOffPressureUnloadsAsBefore) {
  platform::test_util::FakeClock clock;
  Fixture fixture(/*budget_bytes=*/250);
  fixture.set_clock(&clock);
  fixture.set_memory_tiers(false);
  for (const char* name : {"a", "b", "c"}) {
    fixture.AddModel(name, TierConfig(100, 40, 10));
  }
  ASSERT_TRUE(fixture.manager().Load("a", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("b", std::nullopt).ok());
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(fixture.manager().Load("c", std::nullopt).ok());
  EXPECT_EQ(fixture.StateOf("a"), ModelState::kUnavailable);
  EXPECT_EQ(TierOf(fixture, "b"), WeightTier::kHot);
  EXPECT_EQ(fixture.manager().MoveTo("b", WeightTier::kWarm).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Eight threads, three rounds over 24 models loaded on first request, under
// a budget for six of them hot: every request is served (none lost to "no
// idle model left to evict" while a demotion could make room), and the
// budget holds at every change.
TEST(ModelManagerTiersTest, ConcurrentRequestsToManyModelsStayInBudget) {
  constexpr int kModels = 24;
  constexpr int64_t kBudget = 600;
  Fixture fixture(kBudget);
  for (int i = 0; i < kModels; ++i) {
    fixture.AddModel(
        absl::StrCat("m", i),
        TierConfig(100, 45, 12, "load_policy: LOAD_POLICY_FIRST_REQUEST"));
  }
  fixture.manager();
  absl::Mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int client = 0; client < 8; ++client) {
    clients.emplace_back([&, client] {
      for (int round = 0; round < 3; ++round) {
        for (int k = 0; k < kModels; ++k) {
          const std::string name =
              absl::StrCat("m", (client * 5 + k) % kModels);
          if (absl::Status status = Request(fixture, name); !status.ok()) {
            absl::MutexLock lock(&mu);
            failures.push_back(absl::StrCat(name, ": ", status.ToString()));
          }
        }
      }
    });
  }
  for (std::thread& thread : clients) thread.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  EXPECT_LE(fixture.factory().held().most(), kBudget);
  EXPECT_LE(fixture.most_accounted_bytes(), kBudget);
  EXPECT_GT(fixture.factory().held().most(), 0);
  // Demotions happened along the way (where the models end up depends on
  // which requests came last: a request promotes its model back up).
  uint64_t pressure_demotions = 0;
  const auto moves = LifecycleMetrics::Global().snapshot();
  for (int i = 0; i < kModels; ++i) {
    const auto entry = moves.find(absl::StrCat("m", i));
    if (entry == moves.end()) continue;
    for (const auto& [key, count] : entry->second.tier_moves) {
      if (std::get<2>(key) == "pressure") pressure_demotions += count;
    }
  }
  EXPECT_GT(pressure_demotions, 0u) << "pressure demoted models";
}

}  // namespace
}  // namespace castserve
