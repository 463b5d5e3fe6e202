// Prefix caching through the model: a prompt's logits with its leading
// blocks reused from the pool equal those computed from scratch.
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "c10/core/InferenceMode.h"
#include "casting/memory/tracking_allocator.h"
#include "gtest/gtest.h"
#include "models/generation/incremental_decoder.h"
#include "models/generation/kv_block_pool.h"
#include "models/loading/model_loader.h"

namespace castserve::models {
namespace {

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  }
  void SetUp() override {
    auto model = LoadHfModel("models/testdata/" + GetParam(), {});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    decoder_ = model_->incremental_decoder();
    ASSERT_NE(decoder_, nullptr);
    auto pool = KvBlockPool::Create(decoder_->kv_cache_shape(), kBlock,
                                    int64_t{64} << 20, /*prefix_caching=*/true);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
  }

  // Runs `ids` after what `cache` holds; every token's logits [n, vocab].
  at::Tensor Feed(PagedKvCache& cache, const std::vector<int64_t>& ids) {
    c10::InferenceMode inference_mode;
    EXPECT_TRUE(
        cache.Reserve(cache.length() + static_cast<int64_t>(ids.size())).ok());
    ForwardContext context;
    return decoder_->DecodeBatch(context, at::tensor(ids, at::kLong),
                                 {{&cache, static_cast<int64_t>(ids.size())}},
                                 /*last_only=*/false);
  }

  static constexpr int64_t kBlock = 4;
  std::unique_ptr<Model> model_;
  const IncrementalDecoder* decoder_ = nullptr;
  std::unique_ptr<KvBlockPool> pool_;
};

std::vector<int64_t> Prompt(int64_t n, int64_t first) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back((first + 7 * i) % 90 + 3);
  return ids;
}

TEST_P(PrefixCacheTest, ReusedPrefixGivesTheLogitsOfAFullPrefill) {
  const std::vector<int64_t> prompt = Prompt(14, 5);
  PagedKvCache fresh(*pool_);
  at::Tensor full = Feed(fresh, prompt);
  fresh.PublishFullBlocks(prompt);  // 3 full blocks of 4.
  // Then decode two tokens in both, the reused one after a partial prefill.
  PagedKvCache reused(*pool_);
  const int64_t hit = reused.ReuseCachedPrefix(
      absl::MakeConstSpan(prompt).first(prompt.size() - 1));
  ASSERT_EQ(hit, 12);
  EXPECT_EQ(pool_->in_use_bytes(), 4 * pool_->block_bytes());  // Shared.
  at::Tensor tail =
      Feed(reused, std::vector<int64_t>(prompt.begin() + hit, prompt.end()));
  ASSERT_EQ(tail.size(0), 2);
  EXPECT_TRUE(at::allclose(tail, full.narrow(0, 12, 2), 1e-4, 1e-5))
      << (tail - full.narrow(0, 12, 2)).abs().max();
  for (int64_t next : {17, 42}) {
    at::Tensor a = Feed(fresh, {next});
    at::Tensor b = Feed(reused, {next});
    EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max();
    EXPECT_EQ(a.argmax(-1).item<int64_t>(), b.argmax(-1).item<int64_t>());
  }
}

TEST_P(PrefixCacheTest, DivergingMidBlockReusesOnlyTheWholeBlocksBefore) {
  const std::vector<int64_t> prompt = Prompt(14, 5);
  PagedKvCache first(*pool_);
  Feed(first, prompt);
  first.PublishFullBlocks(prompt);
  std::vector<int64_t> other = prompt;
  other[6] = 99;  // Inside the second block.
  PagedKvCache fresh(*pool_);
  at::Tensor full = Feed(fresh, other);
  PagedKvCache diverged(*pool_);
  const int64_t hit = diverged.ReuseCachedPrefix(
      absl::MakeConstSpan(other).first(other.size() - 1));
  ASSERT_EQ(hit, 4);
  at::Tensor tail =
      Feed(diverged, std::vector<int64_t>(other.begin() + hit, other.end()));
  EXPECT_TRUE(at::allclose(tail, full.narrow(0, 4, 10), 1e-4, 1e-5))
      << (tail - full.narrow(0, 4, 10)).abs().max();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheTest,
                         ::testing::Values("llama", "gemma3_text"));

}  // namespace
}  // namespace castserve::models
