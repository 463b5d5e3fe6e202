#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/casting_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/decoder/decoder_model.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

// A tiny Llama-family model written in code: hidden 16, 4 query heads of
// dim 4, 2 kv heads, 2 layers, vocab 40.
struct TinyModel {
  std::string model_type = "llama";
  bool tied = false;
  bool qkv_bias = false;
  int64_t sliding_window = 0;
  bool llama3_rope = true;
};

std::string ConfigJson(const TinyModel& tiny) {
  std::string rope =
      tiny.llama3_rope
          ? R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8},)"
          : R"("rope_scaling": null,)";
  return absl::StrCat(
      R"({"model_type": ")", tiny.model_type, R"(",
    "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 12,
    "rms_norm_eps": 1e-5, "rope_theta": 1000.0, )",
      rope, R"( "tie_word_embeddings": )", tiny.tied ? "true" : "false",
      tiny.sliding_window > 0
          ? absl::StrCat(R"(, "sliding_window": )", tiny.sliding_window)
          : "",
      "}");
}

Tensors RandomWeights(const TinyModel& tiny) {
  at::manual_seed(7);
  Tensors w;
  auto randn = [](std::vector<int64_t> shape, double scale) {
    return at::randn(shape) * scale;
  };
  w["model.embed_tokens.weight"] = randn({40, 16}, 0.5);
  for (int i = 0; i < 2; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    w[p + "input_layernorm.weight"] = 1 + randn({16}, 0.1);
    w[p + "post_attention_layernorm.weight"] = 1 + randn({16}, 0.1);
    w[p + "self_attn.q_proj.weight"] = randn({16, 16}, 0.25);
    w[p + "self_attn.k_proj.weight"] = randn({8, 16}, 0.25);
    w[p + "self_attn.v_proj.weight"] = randn({8, 16}, 0.25);
    w[p + "self_attn.o_proj.weight"] = randn({16, 16}, 0.25);
    if (tiny.qkv_bias) {
      w[p + "self_attn.q_proj.bias"] = randn({16}, 0.1);
      w[p + "self_attn.k_proj.bias"] = randn({8}, 0.1);
      w[p + "self_attn.v_proj.bias"] = randn({8}, 0.1);
    }
    w[p + "mlp.gate_proj.weight"] = randn({24, 16}, 0.25);
    w[p + "mlp.up_proj.weight"] = randn({24, 16}, 0.25);
    w[p + "mlp.down_proj.weight"] = randn({16, 24}, 0.2);
  }
  w["model.norm.weight"] = 1 + randn({16}, 0.1);
  if (!tiny.tied) w["lm_head.weight"] = randn({40, 16}, 0.25);
  return w;
}

// ---- The reference: the network written out directly, in double. ----

at::Tensor Rms(const at::Tensor& x, const at::Tensor& w) {
  return x / (x.pow(2).mean(-1, true) + 1e-5).sqrt() * w;
}

// Llama 3 frequency for pair i of a head of dim 4, theta 1000.
double Frequency(int i, bool llama3) {
  const double freq = std::pow(1000.0, -2.0 * i / 4);
  if (!llama3) return freq;
  const double wavelen = 2 * M_PI / freq;
  if (wavelen < 8.0 / 4) return freq;
  if (wavelen > 8.0 / 1) return freq / 8;
  const double smooth = (8.0 / wavelen - 1) / 3;
  return (1 - smooth) * freq / 8 + smooth * freq;
}

// x [seq, 4]: pairs (i, i + 2) rotated by pos * freq_i.
at::Tensor Rotate(const at::Tensor& x, bool llama3) {
  at::Tensor out = x.clone();
  for (int64_t s = 0; s < x.size(0); ++s) {
    for (int i = 0; i < 2; ++i) {
      const double angle = s * Frequency(i, llama3);
      at::Tensor a = x[s][i], b = x[s][i + 2];
      out[s][i] = a * std::cos(angle) - b * std::sin(angle);
      out[s][i + 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return out;
}

// One sequence: ids [seq], mask [seq] -> logits [seq, vocab].
at::Tensor ReferenceLogits(const TinyModel& tiny, Tensors w,
                           const at::Tensor& ids, const at::Tensor& mask) {
  for (auto& [name, t] : w) t = t.to(at::kDouble);
  auto lin = [&](const at::Tensor& x, const std::string& name) {
    at::Tensor y = at::matmul(x, w[name + ".weight"].t());
    auto bias = w.find(name + ".bias");
    return bias == w.end() ? y : y + bias->second;
  };
  const int64_t seq = ids.size(0);
  at::Tensor h = w["model.embed_tokens.weight"].index_select(0, ids);
  for (int l = 0; l < 2; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    at::Tensor x = Rms(h, w[p + "input_layernorm.weight"]);
    at::Tensor q = lin(x, p + "self_attn.q_proj");
    at::Tensor k = lin(x, p + "self_attn.k_proj");
    at::Tensor v = lin(x, p + "self_attn.v_proj");
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < 4; ++head) {
      const int64_t kv = head / 2;
      at::Tensor qh = Rotate(q.narrow(1, head * 4, 4), tiny.llama3_rope);
      at::Tensor kh = Rotate(k.narrow(1, kv * 4, 4), tiny.llama3_rope);
      at::Tensor scores = at::matmul(qh, kh.t()) / 2.0;
      for (int64_t i = 0; i < seq; ++i) {
        for (int64_t j = 0; j < seq; ++j) {
          const bool in_window =
              tiny.sliding_window == 0 || i - j < tiny.sliding_window;
          if (j > i || mask[j].item<int64_t>() == 0 || !in_window) {
            scores[i][j] = -1e300;  // Finite: no NaN on empty rows.
          }
        }
      }
      heads.push_back(at::matmul(scores.softmax(-1), v.narrow(1, kv * 4, 4)));
    }
    h = h + lin(at::cat(heads, 1), p + "self_attn.o_proj");
    x = Rms(h, w[p + "post_attention_layernorm.weight"]);
    at::Tensor gate = lin(x, p + "mlp.gate_proj");
    h = h + lin(gate * gate.sigmoid() * lin(x, p + "mlp.up_proj"),
                p + "mlp.down_proj");
  }
  h = Rms(h, w["model.norm.weight"]);
  const at::Tensor& head =
      tiny.tied ? w["model.embed_tokens.weight"] : w["lm_head.weight"];
  return at::matmul(h, head.t()).to(at::kFloat);
}

std::string WriteModel(const TinyModel& tiny, const Tensors& weights,
                       const std::string& name) {
  const std::string dir = test_util::MakeScratchDir(name);
  EXPECT_TRUE(
      test_util::WriteSafetensors(dir + "/model.safetensors", weights).ok());
  std::FILE* f = std::fopen((dir + "/config.json").c_str(), "w");
  const std::string json = ConfigJson(tiny);
  std::fwrite(json.data(), 1, json.size(), f);
  std::fclose(f);
  return dir;
}

// Batch of two: a full row of 8 and a right-padded row of 5.
NamedTensors PaddedBatch() {
  at::Tensor ids =
      at::tensor({3, 17, 5, 39, 0, 22, 8, 11, 9, 2, 30, 1, 12, 0, 0, 0},
                 at::kLong)
          .view({2, 8});
  at::Tensor mask =
      at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, at::kLong)
          .view({2, 8});
  return {{"input_ids", ids}, {"attention_mask", mask}};
}

void ExpectMatchesReference(const TinyModel& tiny, const std::string& name) {
  Tensors weights = RandomWeights(tiny);
  auto model = LoadHfModel(WriteModel(tiny, weights, name), {});
  ASSERT_TRUE(model.ok()) << model.status();
  NamedTensors inputs = PaddedBatch();
  auto outputs = (*model)->Forward(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const at::Tensor& logits = outputs->at("logits");
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 8, 40}));
  EXPECT_EQ(logits.scalar_type(), at::kFloat);
  for (int64_t b = 0; b < 2; ++b) {
    at::Tensor expected = ReferenceLogits(tiny, weights, inputs["input_ids"][b],
                                          inputs["attention_mask"][b]);
    // Padded queries may see no real key (sliding window): their outputs
    // are meaningless, so only real tokens are compared.
    at::Tensor real = inputs["attention_mask"][b].nonzero().flatten();
    EXPECT_LT(test_util::RelativeMaxError(logits[b].index_select(0, real),
                                          expected.index_select(0, real)),
              1e-5)
        << name << " row " << b;
  }
}

TEST(LlamaTest, GroupedQueryLlama3RopeMatchesReference) {
  ExpectMatchesReference(TinyModel{}, "llama_gqa");
}

TEST(LlamaTest, Qwen2BiasAndTiedEmbeddingsMatchReference) {
  TinyModel tiny;
  tiny.model_type = "qwen2";
  tiny.tied = true;
  tiny.qkv_bias = true;
  tiny.llama3_rope = false;
  ExpectMatchesReference(tiny, "qwen2_tied");
}

TEST(LlamaTest, MistralSlidingWindowMatchesReference) {
  TinyModel tiny;
  tiny.model_type = "mistral";
  tiny.sliding_window = 3;
  tiny.llama3_rope = false;
  ExpectMatchesReference(tiny, "mistral_window");
}

TEST(LlamaTest, ModulesCarryCheckpointNamesAndKinds) {
  TinyModel tiny;
  tiny.model_type = "qwen2";
  tiny.tied = true;
  tiny.qkv_bias = true;
  auto model = LoadHfModel(WriteModel(tiny, RandomWeights(tiny), "names"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "qwen2");
  std::map<std::string, std::string> kinds;
  (*model)->root().Visit([&](Module& m) { kinds[m.name()] = m.kind(); });
  EXPECT_EQ(kinds["model.layers.1.self_attn"], "Qwen2Attention");
  EXPECT_EQ(kinds["model.layers.1.self_attn.q_proj"], "Linear");
  EXPECT_EQ(kinds["model.layers.0"], "Qwen2DecoderLayer");
  EXPECT_EQ(kinds["model.norm"], "RMSNorm");
  EXPECT_EQ(kinds["lm_head"], "Linear");
}

TEST(LlamaTest, RejectsBadInputsWithClearErrors) {
  TinyModel tiny;
  auto model = LoadHfModel(WriteModel(tiny, RandomWeights(tiny), "inputs"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  auto error = [&](NamedTensors inputs) {
    auto outputs = (*model)->Forward(inputs);
    EXPECT_EQ(outputs.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(outputs.status().message());
  };
  at::Tensor ids = at::ones({1, 4}, at::kLong);
  EXPECT_THAT(error({{"input_ids", ids * 40}}), HasSubstr("vocabulary"));
  EXPECT_THAT(error({{"input_ids", ids * -1}}), HasSubstr("token id -1"));
  EXPECT_THAT(error({{"input_ids", at::ones({1, 13}, at::kLong)}}),
              HasSubstr("max_position_embeddings"));
  EXPECT_THAT(error({{"input_ids", ids.to(at::kInt)}}), HasSubstr("dtype"));
  EXPECT_THAT(error({{"input_ids", ids.view({4})}}), HasSubstr("shape"));
  EXPECT_THAT(error({{"input_ids", ids},
                     {"attention_mask", at::ones({1, 3}, at::kLong)}}),
              HasSubstr("attention_mask"));
  EXPECT_THAT(error({{"input_ids", ids}, {"attention_mask", ids * 2}}),
              HasSubstr("0 and 1"));
  // No attention_mask: every token is real.
  EXPECT_TRUE((*model)->Forward({{"input_ids", ids}}).ok());
}

TEST(LlamaTest, MissingOrMisshapedWeightsFailAtLoad) {
  TinyModel tiny;
  Tensors missing = RandomWeights(tiny);
  missing.erase("model.layers.1.mlp.up_proj.weight");
  auto no_key = LoadHfModel(WriteModel(tiny, missing, "missing"), {});
  EXPECT_THAT(std::string(no_key.status().message()),
              HasSubstr("model.layers.1.mlp.up_proj.weight"));
  // One wrong shape of each kind of weight, loaded mapped and lazily.
  TinyModel biased;
  biased.model_type = "qwen2";  // q/k/v biases.
  biased.qkv_bias = true;
  biased.tied = true;
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  const std::pair<const char*, std::vector<int64_t>> cases[] = {
      {"model.embed_tokens.weight", {211, 16}},
      {"model.layers.0.self_attn.k_proj.weight", {16, 16}},
      {"model.layers.1.self_attn.v_proj.bias", {16}},
      {"model.layers.1.mlp.down_proj.weight", {24, 16}},
      {"model.layers.0.post_attention_layernorm.weight", {64}},
      {"model.norm.weight", {16, 1}},
  };
  for (const auto& [key, shape] : cases) {
    Tensors misshaped = RandomWeights(biased);
    const std::vector<int64_t> expected = misshaped.at(key).sizes().vec();
    misshaped[key] = at::zeros(shape);
    auto bad_shape =
        LoadHfModel(WriteModel(biased, misshaped, "misshaped"), mapped);
    EXPECT_EQ(bad_shape.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(bad_shape.status().message()),
        HasSubstr(absl::StrCat("weight '", key, "': expected shape [",
                               absl::StrJoin(expected, ", "), "], found [",
                               absl::StrJoin(shape, ", "), "]")));
  }
}

TEST(LlamaConfigTest, RejectsUnsupportedRopeAndHeads) {
  auto parse = [](const std::string& json) {
    auto config = HfConfig::Parse(json, "config.json");
    EXPECT_TRUE(config.ok());
    return ReadDecoderSpec(*config).status();
  };
  const std::string base = R"("model_type": "llama", "vocab_size": 8,
      "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
      "max_position_embeddings": 8, )";
  EXPECT_THAT(std::string(parse("{" + base +
                                R"("num_attention_heads": 4,
      "num_key_value_heads": 3})")
                              .message()),
              HasSubstr("num_key_value_heads"));
  EXPECT_THAT(std::string(parse("{" + base +
                                R"("num_attention_heads": 2,
      "rope_scaling": {"type": "yarn", "factor": 2.0}})")
                              .message()),
              HasSubstr("yarn"));
  EXPECT_TRUE(parse("{" + base + R"("num_attention_heads": 2,
      "rope_scaling": {"type": "linear", "factor": 2.0}})")
                  .ok());
}

TEST(LlamaConfigTest, SizesOutOfRangeFailNamingTheField) {
  auto error = [](const std::string& sizes) {
    auto config = HfConfig::Parse(R"({"model_type": "llama", )" + sizes + "}",
                                  "config.json");
    EXPECT_TRUE(config.ok()) << config.status();
    return std::string(ReadDecoderSpec(*config).status().message());
  };
  const std::string base = R"("vocab_size": 40, "intermediate_size": 24,
      "num_hidden_layers": 2, "max_position_embeddings": 12, )";
  EXPECT_EQ(error(base + R"("hidden_size": 1000000000,
                            "num_attention_heads": 4)"),
            "config.json: hidden_size is 1000000000, outside [1, 65536]");
  EXPECT_EQ(error(base + R"("hidden_size": 16, "num_attention_heads": 4,
                            "num_key_value_heads": 0)"),
            "config.json: num_key_value_heads is 0, outside [1, 1024]");
  EXPECT_EQ(error(base + R"("hidden_size": 16, "num_attention_heads": 4,
                            "head_dim": 100000)"),
            "config.json: head_dim is 100000, outside [1, 4096]");
  EXPECT_THAT(error(base + R"("hidden_size": 16, "num_attention_heads": 3)"),
              HasSubstr("hidden_size (16) must be a multiple of "
                        "num_attention_heads (3)"));
  EXPECT_EQ(error(R"("vocab_size": 40, "intermediate_size": 24,
      "num_hidden_layers": 100000, "max_position_embeddings": 12,
      "hidden_size": 16, "num_attention_heads": 4)"),
            "config.json: num_hidden_layers is 100000, outside [1, 1024]");
  EXPECT_EQ(error(R"("vocab_size": 40000000000, "intermediate_size": 24,
      "num_hidden_layers": 2, "max_position_embeddings": 12,
      "hidden_size": 16, "num_attention_heads": 4)"),
            "config.json: vocab_size is 40000000000, outside [1, 16777216]");
  // With an explicit head_dim the heads need not split hidden_size.
  EXPECT_EQ(error(base + R"("hidden_size": 16, "num_attention_heads": 3,
                            "head_dim": 8)"),
            "");
}

// ---- Fixtures recorded with transformers (tools/gen_model_fixtures.py) ----

class LlamaFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = "models/testdata/" + GetParam();
    auto reference =
        test_util::ReadSafetensors(folder_ + "/reference.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
    inputs_ = {{"input_ids", reference_.at("input.input_ids")},
               {"attention_mask", reference_.at("input.attention_mask")}};
  }

  at::Tensor Logits(const WeightPolicyOptions& options) {
    auto model = LoadHfModel(folder_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return at::Tensor();
    auto outputs = (*model)->Forward(inputs_);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    return outputs.ok() ? outputs->at("logits") : at::Tensor();
  }

  static WeightPolicyOptions Casting(const std::string& format,
                                     casting::ElementType compute) {
    auto storage = casting::StorageFormat::Parse(format);
    EXPECT_TRUE(storage.ok()) << storage.status();
    casting::CastingPolicy::Options policy;
    policy.storage_dtype = storage->element;
    policy.scaling = storage->scaling;
    policy.compute_dtype = compute;
    WeightPolicyOptions options;
    options.compute_copy = casting::ComputeCopyPolicy::kTransient;
    options.casting = *casting::CastingPolicy::Create(policy);
    return options;
  }

  std::string folder_;
  Tensors reference_;
  NamedTensors inputs_;
};

TEST_P(LlamaFixtureTest, F32MatchesTransformers) {
  const at::Tensor& expected = reference_.at("output.logits");
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  // Mapped storage with transient copies and prefetch: the larger-than-RAM
  // configuration.
  WeightPolicyOptions streamed = mapped;
  streamed.compute_copy = casting::ComputeCopyPolicy::kTransient;
  streamed.prefetch = true;
  WeightPolicyOptions eager;
  eager.eager = true;
  for (const WeightPolicyOptions& options :
       {WeightPolicyOptions{}, mapped, streamed, eager}) {
    const double error = test_util::RelativeMaxError(Logits(options), expected);
    EXPECT_LE(error, 1e-4);
    std::cout << GetParam() << " f32 max rel error " << error << "\n";
  }
}

TEST_P(LlamaFixtureTest, LayerwiseCastingMatchesRoundTripReference) {
  std::map<std::string, double> cosine;
  for (const std::string& format : test_util::CastFormatNames()) {
    at::Tensor logits = Logits(Casting(format, casting::ElementType::kF32));
    const at::Tensor& expected =
        reference_.at(absl::StrCat("roundtrip.", format, ".output.logits"));
    const double error = test_util::RelativeMaxError(logits, expected);
    EXPECT_LE(error, 1e-4) << format;
    cosine[format] =
        test_util::CosineSimilarity(logits, reference_.at("output.logits"));
    std::cout << GetParam() << " " << format << " max rel error vs roundtrip "
              << error << ", cosine vs f32 reference " << cosine[format]
              << "\n";
  }
  // Scaled fp8 is at least as accurate as the plain cast.
  for (const std::string fp8 : {"F8_E4M3FN", "F8_E5M2"}) {
    EXPECT_GE(cosine[fp8 + ":per_row"], cosine[fp8]) << fp8;
    EXPECT_GE(cosine[fp8 + ":per_tensor"], cosine[fp8]) << fp8;
  }
}

TEST_P(LlamaFixtureTest, Bf16ComputeIsClose) {
  WeightPolicyOptions bf16;
  bf16.compute_dtype = casting::ElementType::kBF16;
  const double cosine =
      test_util::CosineSimilarity(Logits(bf16), reference_.at("output.logits"));
  EXPECT_GE(cosine, 0.999);
  std::cout << GetParam() << " bf16 compute cosine " << cosine << "\n";
  for (const std::string& format : test_util::CastFormatNames()) {
    const double cast_cosine = test_util::CosineSimilarity(
        Logits(Casting(format, casting::ElementType::kBF16)),
        reference_.at(absl::StrCat("roundtrip.", format, ".output.logits")));
    EXPECT_GE(cast_cosine, 0.999) << format;
    std::cout << GetParam() << " bf16 compute + " << format
              << " cosine vs roundtrip " << cast_cosine << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaFixtureTest,
                         ::testing::Values("llama", "mistral", "qwen2"));

}  // namespace
}  // namespace castserve::models
