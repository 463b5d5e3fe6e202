#include "models/kernels/paged_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "casting/codec/codec.h"

namespace castserve::models {
namespace {

struct Case {
  int64_t q_heads = 8;
  int64_t kv_heads = 2;
  int64_t head_dim = 64;
  int64_t block_tokens = 16;
  double softcap = 0;
  int64_t window = 0;
  at::ScalarType kv_dtype = at::kFloat;
  // Per sequence: (tokens, queries).
  std::vector<std::pair<int64_t, int64_t>> sequences;
};

// Blocks of a pool in a shuffled order, and per sequence its block table.
struct Pool {
  std::vector<at::Tensor> keys, values;  // [kv_heads, block_tokens, dim]
  std::vector<std::vector<int64_t>> tables;
};

Pool MakePool(const Case& c, std::mt19937& rng) {
  Pool pool;
  int64_t blocks = 0;
  for (auto [tokens, queries] : c.sequences) {
    blocks += (tokens + c.block_tokens - 1) / c.block_tokens;
  }
  std::vector<int64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t b = 0; b < blocks; ++b) {
    pool.keys.push_back(
        at::randn({c.kv_heads, c.block_tokens, c.head_dim}).to(c.kv_dtype));
    pool.values.push_back(
        at::randn({c.kv_heads, c.block_tokens, c.head_dim}).to(c.kv_dtype));
  }
  int64_t next = 0;
  for (auto [tokens, queries] : c.sequences) {
    std::vector<int64_t> table;
    for (int64_t t = 0; t < tokens; t += c.block_tokens) {
      table.push_back(order[next++]);
    }
    pool.tables.push_back(table);
  }
  return pool;
}

// The gather path in f64: the sequence's blocks concatenated, scores,
// soft cap, causal (windowed) mask, softmax, values.
at::Tensor GatherAttention(const Case& c, const Pool& pool, int64_t s,
                           const at::Tensor& q /*[q_heads, n, dim]*/) {
  const auto [tokens, n] = c.sequences[s];
  std::vector<at::Tensor> k_parts, v_parts;
  for (int64_t b : pool.tables[s]) {
    k_parts.push_back(pool.keys[b]);
    v_parts.push_back(pool.values[b]);
  }
  const int64_t group = c.q_heads / c.kv_heads;
  at::Tensor k = at::cat(k_parts, 1).narrow(1, 0, tokens).to(at::kDouble);
  at::Tensor v = at::cat(v_parts, 1).narrow(1, 0, tokens).to(at::kDouble);
  k = k.repeat_interleave(group, 0);
  v = v.repeat_interleave(group, 0);
  const double scale = 1 / std::sqrt(static_cast<double>(c.head_dim));
  at::Tensor scores = at::matmul(q.to(at::kDouble), k.transpose(1, 2)) * scale;
  if (c.softcap > 0) scores = at::tanh(scores / c.softcap) * c.softcap;
  at::Tensor allowed = at::ones({n, tokens}, at::kBool).tril(tokens - n);
  if (c.window > 0) allowed = allowed.triu(tokens - n - c.window + 1);
  scores = scores.masked_fill(allowed.logical_not(), -1e300);
  return at::matmul(at::softmax(scores, -1), v);
}

void ExpectPagedMatchesGather(const Case& c, casting::CodecIsa isa) {
  std::mt19937 rng(7);
  at::manual_seed(11);
  Pool pool = MakePool(c, rng);
  int64_t total = 0;
  for (auto [tokens, queries] : c.sequences) total += queries;
  at::Tensor q = at::randn({1, c.q_heads, total, c.head_dim});
  if (c.softcap > 0) q = q * 8;  // Scores large enough for the cap to bite.
  std::vector<PagedQueries> sequences;
  int64_t offset = 0;
  for (size_t s = 0; s < c.sequences.size(); ++s) {
    PagedQueries p;
    for (int64_t b : pool.tables[s]) {
      p.kv.keys.push_back(pool.keys[b].const_data_ptr());
      p.kv.values.push_back(pool.values[b].const_data_ptr());
    }
    p.kv.tokens = c.sequences[s].first;
    p.kv.block_tokens = c.block_tokens;
    p.kv.dtype = c.kv_dtype;
    p.offset = offset;
    p.count = c.sequences[s].second;
    offset += p.count;
    sequences.push_back(p);
  }
  PagedAttentionOptions options;
  options.kv_heads = c.kv_heads;
  options.scale = 1 / std::sqrt(static_cast<double>(c.head_dim));
  options.softcap = c.softcap;
  options.sliding_window = c.window;
  options.isa = isa;
  at::Tensor out = PagedAttention(q, sequences, options);
  ASSERT_EQ(out.scalar_type(), at::kFloat);
  for (size_t s = 0; s < sequences.size(); ++s) {
    at::Tensor rows = q[0].narrow(1, sequences[s].offset, sequences[s].count);
    at::Tensor expected = GatherAttention(c, pool, s, rows);
    at::Tensor got = out[0].narrow(1, sequences[s].offset, sequences[s].count);
    const double diff =
        (got.to(at::kDouble) - expected).abs().max().item<double>();
    EXPECT_LT(diff, 2e-5) << "sequence " << s << " isa "
                          << casting::CodecIsaName(isa);
  }
}

std::vector<casting::CodecIsa> Isas() {
  std::vector<casting::CodecIsa> isas;
  for (casting::CodecIsa isa :
       {casting::CodecIsa::kReference, casting::CodecIsa::kAvx2,
        casting::CodecIsa::kAvx512}) {
    if (casting::CodecIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

void ExpectAllIsas(const Case& c) {
  for (casting::CodecIsa isa : Isas()) ExpectPagedMatchesGather(c, isa);
}

TEST(PagedAttentionTest, DecodeRaggedLengthsAcrossBlockBoundaries) {
  Case c;
  // 1 token; exactly one block; one past it; many blocks, partly filled.
  c.sequences = {{1, 1}, {16, 1}, {17, 1}, {100, 1}, {512, 1}};
  ExpectAllIsas(c);
}

TEST(PagedAttentionTest, PrefillChunkAfterCachedBlocksIsCausal) {
  Case c;
  // A chunk of 5 after 32 cached tokens; a chunk spanning a boundary; a
  // whole prompt with nothing cached before it.
  c.sequences = {{37, 5}, {20, 8}, {9, 9}};
  ExpectAllIsas(c);
}

TEST(PagedAttentionTest, MultiHeadAndManyGroupedHeads) {
  Case mha;
  mha.q_heads = mha.kv_heads = 4;
  mha.sequences = {{33, 1}, {7, 3}};
  ExpectAllIsas(mha);
  Case gqa;
  gqa.q_heads = 14;  // 7 per kv head: a tile of 4 and one of 3.
  gqa.kv_heads = 2;
  gqa.sequences = {{40, 2}};
  ExpectAllIsas(gqa);
}

TEST(PagedAttentionTest, HeadDimsWithScalarTails) {
  for (int64_t dim : {72, 20, 128}) {
    Case c;
    c.head_dim = dim;
    c.block_tokens = 5;
    c.sequences = {{23, 1}, {11, 4}};
    ExpectAllIsas(c);
  }
}

TEST(PagedAttentionTest, SlidingWindowAndSoftCap) {
  Case window;
  window.window = 7;
  window.sequences = {{50, 1}, {30, 6}, {4, 2}};
  ExpectAllIsas(window);
  Case capped;
  capped.softcap = 30;
  capped.sequences = {{45, 1}, {12, 3}};
  ExpectAllIsas(capped);
}

TEST(PagedAttentionTest, Bf16AndF16Blocks) {
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    Case c;
    c.kv_dtype = dtype;
    c.sequences = {{1, 1}, {65, 1}, {30, 7}};
    ExpectAllIsas(c);
  }
}

TEST(PagedAttentionTest, Bf16QueriesAreReadAsTheirValues) {
  Case c;
  c.sequences = {{19, 2}};
  std::mt19937 rng(3);
  Pool pool = MakePool(c, rng);
  at::Tensor q = at::randn({1, c.q_heads, 2, c.head_dim}).to(at::kBFloat16);
  PagedQueries p;
  for (int64_t b : pool.tables[0]) {
    p.kv.keys.push_back(pool.keys[b].const_data_ptr());
    p.kv.values.push_back(pool.values[b].const_data_ptr());
  }
  p.kv.tokens = 19;
  p.kv.block_tokens = c.block_tokens;
  p.count = 2;
  PagedAttentionOptions options;
  options.kv_heads = c.kv_heads;
  options.scale = 0.125;
  at::Tensor from_bf16 = PagedAttention(q, {p}, options);
  at::Tensor from_f32 = PagedAttention(q.to(at::kFloat), {p}, options);
  EXPECT_TRUE(at::equal(from_bf16, from_f32));
}

TEST(PagedAttentionTest, SupportsTheFloatingKvDtypes) {
  EXPECT_TRUE(PagedAttentionSupports(at::kFloat));
  EXPECT_TRUE(PagedAttentionSupports(at::kBFloat16));
  EXPECT_TRUE(PagedAttentionSupports(at::kHalf));
  EXPECT_FALSE(PagedAttentionSupports(at::kDouble));
  EXPECT_FALSE(PagedAttentionKernelName().empty());
}

}  // namespace
}  // namespace castserve::models
