#include "server/lifecycle/lru_eviction_policy.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(LruEvictionPolicyTest, WithoutABudgetEverythingFits) {
  LruEvictionPolicy policy(0);
  EXPECT_FALSE(policy.has_budget());
  EXPECT_TRUE(policy.Fits(int64_t{1} << 50, false));
  EXPECT_TRUE(policy.CheckAlone("m", int64_t{1} << 50).ok());
}

TEST(LruEvictionPolicyTest, ALoadNeedsRoomLeftALoadedModelMayFillTheBudget) {
  LruEvictionPolicy policy(100);
  EXPECT_FALSE(policy.Fits(100, /*with_incoming=*/false));
  EXPECT_TRUE(policy.Fits(99, /*with_incoming=*/false));
  EXPECT_TRUE(policy.Fits(100, /*with_incoming=*/true));
  EXPECT_FALSE(policy.Fits(101, /*with_incoming=*/true));
}

TEST(LruEvictionPolicyTest, AModelLargerThanTheBudgetAloneIsRefused) {
  LruEvictionPolicy policy(100);
  EXPECT_TRUE(policy.CheckAlone("m", 100).ok());
  absl::Status alone = policy.CheckAlone("m", 101);
  EXPECT_EQ(alone.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(alone.message().find("alone needs 101 bytes"), std::string::npos);
}

TEST(LruEvictionPolicyTest, PicksTheLeastRecentlyUsedEvictableModel) {
  LruEvictionPolicy policy(100);
  const std::vector<EvictionCandidate> candidates = {
      {"a", kT0 + absl::Seconds(3), true},
      {"busy", kT0, false},  // Oldest, but in use.
      {"b", kT0 + absl::Seconds(1), true},
      {"c", kT0 + absl::Seconds(2), true},
  };
  EXPECT_EQ(policy.PickVictim(candidates, "x"), "b");
  EXPECT_EQ(policy.PickVictim(candidates, "b"), "c");  // Never the one kept.
}

TEST(LruEvictionPolicyTest, NoVictimWhenNothingIsEvictable) {
  LruEvictionPolicy policy(100);
  EXPECT_EQ(
      policy.PickVictim({{"busy", kT0, false}, {"keep", kT0, true}}, "keep"),
      std::nullopt);
  EXPECT_EQ(policy.NothingToEvict("keep", 150, true).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace castserve
