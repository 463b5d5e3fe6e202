#include "models/encoders/clip_vision.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

// Hidden 8, 2 heads, 1 layer, 1 channel, 8x8 images of 4x4 patches; the
// activation and eps are left to CLIP's defaults (quick_gelu, 1e-5).
constexpr const char* kConfig = R"({"model_type": "clip_vision_model",
  "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_channels": 1, "image_size": 8,
  "patch_size": 4})";

Tensors RandomWeights() {
  at::manual_seed(13);
  Tensors w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape,
                 double scale, double offset = 0) {
    w["vision_model." + name] = at::randn(shape) * scale + offset;
  };
  add("embeddings.class_embedding", {8}, 0.5);
  add("embeddings.patch_embedding.weight", {8, 1, 4, 4}, 0.25);
  add("embeddings.position_embedding.weight", {5, 8}, 0.5);
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", {out, in}, 1 / std::sqrt(in));
    add(name + ".bias", {out}, 0.1);
  };
  auto norm = [&](const std::string& name) {
    add(name + ".weight", {8}, 0.1, 1);
    add(name + ".bias", {8}, 0.1);
  };
  norm("pre_layrnorm");
  const std::string layer = "encoder.layers.0.";
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
    linear(layer + "self_attn." + proj, 8, 8);
  }
  norm(layer + "layer_norm1");
  norm(layer + "layer_norm2");
  linear(layer + "mlp.fc1", 12, 8);
  linear(layer + "mlp.fc2", 8, 12);
  norm("post_layernorm");
  return w;
}

at::Tensor Norm(const at::Tensor& x, Tensors& w, const std::string& name) {
  at::Tensor mean = x.mean(-1, true);
  at::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / (var + 1e-5).sqrt() * w[name + ".weight"] +
         w[name + ".bias"];
}

at::Tensor Lin(const at::Tensor& x, Tensors& w, const std::string& name) {
  return at::matmul(x, w[name + ".weight"].t()) + w[name + ".bias"];
}

// image [1, 8, 8] -> (last_hidden_state [5, 8], pooler_output [8]), in
// double.
std::pair<at::Tensor, at::Tensor> Reference(Tensors w,
                                            const at::Tensor& image) {
  for (auto& [name, t] : w) t = t.to(at::kDouble);
  const std::string p = "vision_model.";
  at::Tensor x = at::empty({5, 8}, at::kDouble);
  x[0] = w[p + "embeddings.class_embedding"];
  at::Tensor filters =
      w[p + "embeddings.patch_embedding.weight"].reshape({8, -1});
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      at::Tensor patch = image.to(at::kDouble)
                             .narrow(1, 4 * r, 4)
                             .narrow(2, 4 * c, 4)
                             .reshape({-1});
      x[1 + r * 2 + c] = at::matmul(filters, patch);
    }
  }
  x = Norm(x + w[p + "embeddings.position_embedding.weight"], w,
           p + "pre_layrnorm");
  const std::string l = p + "encoder.layers.0.";
  at::Tensor n = Norm(x, w, l + "layer_norm1");
  at::Tensor q = Lin(n, w, l + "self_attn.q_proj");
  at::Tensor k = Lin(n, w, l + "self_attn.k_proj");
  at::Tensor v = Lin(n, w, l + "self_attn.v_proj");
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < 2; ++h) {
    at::Tensor scores =
        at::matmul(q.narrow(1, 4 * h, 4), k.narrow(1, 4 * h, 4).t()) / 2.0;
    heads.push_back(at::matmul(scores.softmax(-1), v.narrow(1, 4 * h, 4)));
  }
  x = x + Lin(at::cat(heads, 1), w, l + "self_attn.out_proj");
  n = Norm(x, w, l + "layer_norm2");
  at::Tensor inner = Lin(n, w, l + "mlp.fc1");
  x = x + Lin(inner * (1.702 * inner).sigmoid(), w, l + "mlp.fc2");
  at::Tensor pooled = Norm(x[0], w, p + "post_layernorm");
  return {x.to(at::kFloat), pooled.to(at::kFloat)};
}

std::string WriteModel(const Tensors& weights, const std::string& name,
                       const std::string& config = kConfig) {
  const std::string dir = test_util::MakeScratchDir(name);
  EXPECT_TRUE(
      test_util::WriteSafetensors(dir + "/model.safetensors", weights).ok());
  std::FILE* f = std::fopen((dir + "/config.json").c_str(), "w");
  std::fwrite(config.data(), 1, config.size(), f);
  std::fclose(f);
  return dir;
}

TEST(ClipVisionTest, MatchesReference) {
  Tensors weights = RandomWeights();
  auto model = LoadHfModel(WriteModel(weights, "clip_ref"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "clip_vision_model");
  at::Tensor pixels = at::randn({2, 1, 8, 8});
  auto outputs = (*model)->Forward({{"pixel_values", pixels}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->at("last_hidden_state").sizes(),
            (std::vector<int64_t>{2, 5, 8}));
  for (int64_t b = 0; b < 2; ++b) {
    auto [last, pooled] = Reference(weights, pixels[b]);
    EXPECT_LT(
        test_util::RelativeMaxError(outputs->at("last_hidden_state")[b], last),
        1e-5);
    EXPECT_LT(
        test_util::RelativeMaxError(outputs->at("pooler_output")[b], pooled),
        1e-5);
  }
}

TEST(ClipVisionTest, NamesKindsAndErrors) {
  auto model = LoadHfModel(WriteModel(RandomWeights(), "clip_names"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, std::string> kinds;
  (*model)->root().Visit([&](Module& m) { kinds[m.name()] = m.kind(); });
  EXPECT_EQ(kinds["vision_model.embeddings"], "CLIPVisionEmbeddings");
  EXPECT_EQ(kinds["vision_model.pre_layrnorm"], "LayerNorm");
  EXPECT_EQ(kinds["vision_model.encoder.layers.0.mlp"], "CLIPMLP");
  auto wrong_size =
      (*model)->Forward({{"pixel_values", at::randn({1, 3, 8, 8})}});
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
  Tensors missing = RandomWeights();
  missing.erase("vision_model.embeddings.class_embedding");
  EXPECT_THAT(std::string(LoadHfModel(WriteModel(missing, "clip_missing"), {})
                              .status()
                              .message()),
              HasSubstr("vision_model.embeddings.class_embedding"));
}

TEST(ClipVisionTest, MisshapedWeightsFailAtLoadNamingTheTensor) {
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  const std::pair<const char*, std::vector<int64_t>> cases[] = {
      {"embeddings.class_embedding", {16}},
      {"embeddings.patch_embedding.weight", {8, 3, 4, 4}},
      {"embeddings.position_embedding.weight", {4, 8}},
      {"pre_layrnorm.weight", {64}},
      {"encoder.layers.0.self_attn.q_proj.bias", {4}},
  };
  for (const auto& [local, shape] : cases) {
    const std::string key = std::string("vision_model.") + local;
    Tensors bad = RandomWeights();
    const std::vector<int64_t> expected = bad.at(key).sizes().vec();
    bad[key] = at::zeros(shape);
    auto model = LoadHfModel(WriteModel(bad, "clip_misshaped"), mapped);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(model.status().message()),
        HasSubstr(absl::StrCat("weight '", key, "': expected shape [",
                               absl::StrJoin(expected, ", "), "], found [",
                               absl::StrJoin(shape, ", "), "]")));
  }
}

TEST(ClipVisionTest, SizesOutOfRangeFailAtLoadNamingTheField) {
  std::string config = kConfig;
  config.replace(config.find("\"image_size\": 8"),
                 std::string("\"image_size\": 8").size(),
                 "\"image_size\": 100000");
  auto model =
      LoadHfModel(WriteModel(RandomWeights(), "clip_huge", config), {});
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("image_size is 100000, outside [1, 4096]"));
}

}  // namespace
}  // namespace castserve::models
