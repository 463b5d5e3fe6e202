#include "server/lifecycle/lru_eviction_policy.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

using Victims = std::vector<std::string>;

TEST(LruEvictionPolicyTest, WithoutABudgetEverythingFits) {
  LruEvictionPolicy policy(0);
  EXPECT_FALSE(policy.has_budget());
  EXPECT_TRUE(policy.Fits(int64_t{1} << 50, int64_t{1} << 50));
  EXPECT_TRUE(policy.CheckAlone("m", int64_t{1} << 50).ok());
}

TEST(LruEvictionPolicyTest, WhatIsNeededFitsBesideWhatIsHeldUpToTheBudget) {
  LruEvictionPolicy policy(100);
  EXPECT_TRUE(policy.Fits(60, 40));
  EXPECT_FALSE(policy.Fits(60, 41));
  EXPECT_TRUE(policy.Fits(0, 100));
}

TEST(LruEvictionPolicyTest, AModelLargerThanTheBudgetAloneIsRefused) {
  LruEvictionPolicy policy(100);
  EXPECT_TRUE(policy.CheckAlone("m", 100).ok());
  absl::Status alone = policy.CheckAlone("m", 101);
  EXPECT_EQ(alone.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(alone.message().find("model m alone needs 101 bytes"),
            std::string::npos)
      << alone;
  EXPECT_NE(alone.message().find("budget 100 bytes"), std::string::npos)
      << alone;
}

TEST(LruEvictionPolicyTest, PicksTheLeastRecentlyUsedEvictableModelsUntilRoom) {
  LruEvictionPolicy policy(100);
  const std::vector<EvictionCandidate> candidates = {
      {"a", kT0 + absl::Seconds(3), true, 30},
      {"busy", kT0, false, 50},  // Oldest, but in use.
      {"b", kT0 + absl::Seconds(1), true, 10},
      {"c", kT0 + absl::Seconds(2), true, 20},
  };
  EXPECT_EQ(policy.PickVictims(candidates, "x", 10), Victims({"b"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 11), Victims({"b", "c"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 60), Victims({"b", "c", "a"}));
  // Never the one kept.
  EXPECT_EQ(policy.PickVictims(candidates, "b", 15), Victims({"c"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 0), Victims());
}

TEST(LruEvictionPolicyTest, NeverUnloadsAModelThatCountsNothing) {
  // A cool model (weights left in mapped pages) counts no bytes: unloading
  // it frees nothing the budget counts, and its next request pays a load.
  LruEvictionPolicy policy(100);
  const std::vector<EvictionCandidate> candidates = {
      {"cool", kT0, true, 0},
      {"hot", kT0 + absl::Seconds(1), true, 40},
      {"also_cool", kT0 + absl::Seconds(2), true, 0},
      {"warm", kT0 + absl::Seconds(3), true, 20},
  };
  EXPECT_EQ(policy.PickVictims(candidates, "x", 30), Victims({"hot"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 50), Victims({"hot", "warm"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 61), Victims());
}

TEST(LruEvictionPolicyTest,
     UnloadsAModelThatCountsAlmostNothingOnlyAsALastResort) {
  // A cool generation model counts its buffers only (its weights are mapped
  // pages, its KV pool freed): under 1/1024 of this budget.
  LruEvictionPolicy policy(102400);
  const std::vector<EvictionCandidate> candidates = {
      {"cool", kT0, true, 99},
      {"hot", kT0 + absl::Seconds(1), true, 40000},
      {"also_cool", kT0 + absl::Seconds(2), true, 50},
      {"warm", kT0 + absl::Seconds(3), true, 20000},
  };
  EXPECT_EQ(policy.PickVictims(candidates, "x", 30000), Victims({"hot"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 50000),
            Victims({"hot", "warm"}));
  // The others do not make room: the least recently used of the rest too.
  EXPECT_EQ(policy.PickVictims(candidates, "x", 60050),
            Victims({"hot", "warm", "cool"}));
  EXPECT_EQ(policy.PickVictims(candidates, "x", 60150), Victims());
}

TEST(LruEvictionPolicyTest, EvictsNothingWhenEvictingAllIdleWouldNotSuffice) {
  LruEvictionPolicy policy(100);
  const std::vector<EvictionCandidate> candidates = {
      {"idle", kT0, true, 30},
      {"busy", kT0, false, 70},
  };
  EXPECT_EQ(policy.PickVictims(candidates, "x", 31), Victims());
}

TEST(LruEvictionPolicyTest, RefusalNamesTheModelTheBytesAndTheHolders) {
  LruEvictionPolicy policy(100);
  const absl::Status refused = policy.NoRoomBeforeDeadline(
      "b", 60, 70, {{"a", 50, "1 request in flight"}, {"c", 20, "loading"}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "memory budget exceeded: model b needs 60 bytes, budget 100 "
            "bytes, 70 bytes held: a 50 bytes (1 request in flight), c 20 "
            "bytes (loading); none became idle before the deadline");
  EXPECT_EQ(policy.WaitingReason("b", 60, 0, {})
                .rfind("waiting for memory: "
                       "model b needs 60",
                       0),
            0u);
}

}  // namespace
}  // namespace castserve
