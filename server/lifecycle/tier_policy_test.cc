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

TEST(TierPolicyTest, LowerPriorityThenCheapestToWakeForItsIdleTimeThenLRU) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  auto candidate = [&](std::string name, int priority, int idle_seconds,
                       double wake_rate) {
    TierCandidate c;
    c.name = std::move(name);
    c.priority = priority;
    c.last_used = now - absl::Seconds(idle_seconds);
    c.movable = true;
    c.next = WeightTier::kWarm;
    c.next_wake_rate = wake_rate;
    c.freeable_bytes = 10;
    return c;
  };
  std::vector<TierCandidate> candidates = {
      candidate("idle_slow", 0, 100, 1),    // 100
      candidate("recent_fast", 0, 10, 20),  // 200: wakes 20x as fast
      candidate("recent_slow", 0, 10, 1),   // 10
      candidate("important", 5, 900, 100),  // a higher priority
  };
  EXPECT_EQ(PickDemotion(candidates, "", now), "recent_fast");
  EXPECT_EQ(PickDemotion(candidates, "recent_fast", now), "idle_slow");
  // Idle 10x as long, waking 20x slower: still after recent_fast; idle
  // 25x as long, before it.
  candidates[0].last_used = now - absl::Seconds(250);
  EXPECT_EQ(PickDemotion(candidates, "", now), "idle_slow");

  candidates[2].priority = -1;
  EXPECT_EQ(PickDemotion(candidates, "", now), "recent_slow")
      << "a lower priority goes first, however it wakes";

  // Equal products: the least recently used.
  candidates = {candidate("newer", 0, 10, 4), candidate("older", 0, 20, 2)};
  EXPECT_EQ(PickDemotion(candidates, "", now), "older");

  // Never used is the longest idle; not movable, or nothing left to demote:
  // not a candidate.
  candidates = {candidate("used", 0, 10, 1000), candidate("never", 0, 0, 1),
                candidate("busy", 0, 500, 1000),
                candidate("at_floor", 0, 500, 1000)};
  candidates[1].last_used = absl::InfinitePast();
  candidates[2].movable = false;
  candidates[3].next.reset();
  EXPECT_EQ(PickDemotion(candidates, "", now), "never");
  EXPECT_EQ(PickDemotion(candidates, "never", now), "used");
  EXPECT_EQ(FreeableBytes(candidates, ""), 30);
  EXPECT_EQ(FreeableBytes(candidates, "used"), 20);
  EXPECT_EQ(PickDemotion({}, "", now), std::nullopt);
}

TEST(TierPolicyTest, WakeRatesAverageTimedPromotionsByTheTierTheyLeft) {
  WakeRates rates;
  EXPECT_EQ(rates.BytesPerSecond(WeightTier::kCool), std::nullopt);
  EXPECT_EQ(rates.AnyBytesPerSecond(), std::nullopt);
  // 900 bytes built back in 1 s, then in 0.1 s: the last weighs half.
  rates.Note(900, WeightTier::kCool, absl::Seconds(1));
  EXPECT_DOUBLE_EQ(*rates.BytesPerSecond(WeightTier::kCool), 900);
  rates.Note(900, WeightTier::kCool, absl::Milliseconds(100));
  EXPECT_DOUBLE_EQ(*rates.BytesPerSecond(WeightTier::kCool), 4950);
  EXPECT_EQ(rates.BytesPerSecond(WeightTier::kWarm), std::nullopt);
  // Nothing built back, or no time taken: not a measurement.
  rates.Note(0, WeightTier::kWarm, absl::Seconds(1));
  rates.Note(600, WeightTier::kWarm, absl::ZeroDuration());
  EXPECT_EQ(rates.BytesPerSecond(WeightTier::kWarm), std::nullopt);
  rates.Note(600, WeightTier::kWarm, absl::Seconds(2));
  EXPECT_DOUBLE_EQ(*rates.BytesPerSecond(WeightTier::kWarm), 300);

  // The model's own rate for the tier, else its rate from another tier,
  // else every model's for the tier, else the prior (warm before cool).
  WakeRates all;
  WakeRates none;
  EXPECT_DOUBLE_EQ(ExpectedWakeRate(rates, all, WeightTier::kWarm), 300);
  WakeRates cool_only;
  cool_only.Note(900, WeightTier::kCool, absl::Seconds(3));
  EXPECT_DOUBLE_EQ(ExpectedWakeRate(cool_only, all, WeightTier::kWarm), 300);
  all.Note(600, WeightTier::kWarm, absl::Seconds(6));
  EXPECT_DOUBLE_EQ(ExpectedWakeRate(none, all, WeightTier::kWarm), 100);
  EXPECT_GT(ExpectedWakeRate(none, none, WeightTier::kWarm),
            ExpectedWakeRate(none, none, WeightTier::kCool));
}

}  // namespace
}  // namespace castserve
