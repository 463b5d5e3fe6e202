#include "server/lifecycle/tier_policy.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using casting::WeightTier;

TEST(TierPolicyTest, TiersThatFreeNothingAreSkipped) {
  // No cached compute copies: warm holds what hot holds.
  const TierBytes resident{100, 100, 10};
  EXPECT_EQ(NextTierDown(resident, WeightTier::kHot, WeightTier::kCool),
            WeightTier::kCool);
  EXPECT_EQ(EffectiveTier(resident, WeightTier::kWarm), WeightTier::kHot);
  EXPECT_EQ(EffectiveTier(resident, WeightTier::kCool), WeightTier::kCool);
  // Mapped with cached copies: cool frees nothing beyond warm.
  const TierBytes mapped{100, 5, 5};
  EXPECT_EQ(NextTierDown(mapped, WeightTier::kHot, WeightTier::kCool),
            WeightTier::kWarm);
  EXPECT_EQ(NextTierDown(mapped, WeightTier::kWarm, WeightTier::kCool),
            std::nullopt);
  EXPECT_EQ(EffectiveTier(mapped, WeightTier::kCool), WeightTier::kWarm);
  EXPECT_EQ(
      NextTierDown(TierBytes::Flat(7), WeightTier::kHot, WeightTier::kCool),
      std::nullopt);
}

TEST(TierPolicyTest, NothingGoesBelowTheFloor) {
  const TierBytes bytes{100, 50, 10};
  EXPECT_EQ(NextTierDown(bytes, WeightTier::kHot, WeightTier::kWarm),
            WeightTier::kWarm);
  EXPECT_EQ(NextTierDown(bytes, WeightTier::kWarm, WeightTier::kWarm),
            std::nullopt);
  EXPECT_EQ(NextTierDown(bytes, WeightTier::kHot, WeightTier::kHot),
            std::nullopt);
}

TEST(TierPolicyTest, ParsesTierNamesAndNamesWhatItRefuses) {
  EXPECT_EQ(*ParseWeightTier("warm"), WeightTier::kWarm);
  absl::StatusOr<WeightTier> bad = ParseWeightTier("lukewarm");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'lukewarm'"), std::string::npos);
}

TEST(TierPolicyTest, KeepAliveIsADurationOrTheServerDefault) {
  inference::ModelConfig config;
  config.set_name("m");
  EXPECT_TRUE(ValidateMemoryTiers(config).ok());
  EXPECT_EQ(TierSettingsOf(config, absl::Seconds(9)).keep_alive,
            absl::Seconds(9));
  config.mutable_tiers()->set_keep_alive("5m");
  config.mutable_tiers()->set_pin(inference::MEMORY_TIER_WARM);
  config.mutable_tiers()->set_priority(3);
  ASSERT_TRUE(ValidateMemoryTiers(config).ok());
  const TierSettings settings = TierSettingsOf(config, absl::Seconds(9));
  EXPECT_EQ(settings.keep_alive, absl::Minutes(5));
  EXPECT_TRUE(settings.pinned);
  EXPECT_EQ(settings.floor, WeightTier::kWarm);
  EXPECT_EQ(settings.priority, 3);
  config.mutable_tiers()->set_keep_alive("inf");
  EXPECT_EQ(TierSettingsOf(config, absl::Seconds(9)).keep_alive,
            absl::InfiniteDuration());
  for (const char* bad : {"soon", "-5s", "5"}) {
    config.mutable_tiers()->set_keep_alive(bad);
    const absl::Status status = ValidateMemoryTiers(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("tiers.keep_alive"), std::string::npos);
    EXPECT_NE(status.message().find(absl::StrCat("'", bad, "'")),
              std::string::npos);
  }
}

TEST(TierPolicyTest, CheapestToWakeThenLowerPriorityThenLeastRecentlyUsed) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  auto candidate = [&](std::string name, WeightTier tier, int priority,
                       int age_seconds) {
    TierCandidate c;
    c.name = std::move(name);
    c.tier = tier;
    c.priority = priority;
    c.last_used = t0 - absl::Seconds(age_seconds);
    c.movable = true;
    c.next = WeightTier::kCool;
    c.freeable_bytes = 10;
    return c;
  };
  std::vector<TierCandidate> candidates = {
      candidate("warm_old", WeightTier::kWarm, 0, 100),
      candidate("hot_new", WeightTier::kHot, 0, 1),
      candidate("hot_old", WeightTier::kHot, 0, 50),
      candidate("hot_important", WeightTier::kHot, 5, 99),
  };
  EXPECT_EQ(PickDemotion(candidates, ""), "hot_old");
  EXPECT_EQ(PickDemotion(candidates, "hot_old"), "hot_new");
  candidates[1].priority = -1;
  EXPECT_EQ(PickDemotion(candidates, ""), "hot_new");
  for (TierCandidate& c : candidates) {
    if (c.tier == WeightTier::kHot) c.movable = false;
  }
  EXPECT_EQ(PickDemotion(candidates, ""), "warm_old");
  EXPECT_EQ(FreeableBytes(candidates, ""), 10);
  EXPECT_EQ(FreeableBytes(candidates, "warm_old"), 0);
}

}  // namespace
}  // namespace castserve
