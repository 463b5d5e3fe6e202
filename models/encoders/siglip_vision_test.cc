#include "models/encoders/siglip_vision.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/casting_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

// Hidden 8, 2 heads, 1 layer, 2 channels, 8x8 images of 4x4 patches.
constexpr const char* kConfig = R"({"model_type": "siglip_vision_model",
  "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
  "num_attention_heads": 2, "num_channels": 2, "image_size": 8,
  "patch_size": 4, "layer_norm_eps": 1e-6,
  "hidden_act": "gelu_pytorch_tanh"})";

Tensors RandomWeights() {
  at::manual_seed(11);
  Tensors w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape,
                 double scale, double offset = 0) {
    w["vision_model." + name] = at::randn(shape) * scale + offset;
  };
  add("embeddings.patch_embedding.weight", {8, 2, 4, 4}, 0.2);
  add("embeddings.patch_embedding.bias", {8}, 0.1);
  add("embeddings.position_embedding.weight", {4, 8}, 0.5);
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", {out, in}, 1 / std::sqrt(in));
    add(name + ".bias", {out}, 0.1);
  };
  auto norm = [&](const std::string& name) {
    add(name + ".weight", {8}, 0.1, 1);
    add(name + ".bias", {8}, 0.1);
  };
  const std::string layer = "encoder.layers.0.";
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
    linear(layer + "self_attn." + proj, 8, 8);
  }
  norm(layer + "layer_norm1");
  norm(layer + "layer_norm2");
  linear(layer + "mlp.fc1", 12, 8);
  linear(layer + "mlp.fc2", 8, 12);
  norm("post_layernorm");
  add("head.probe", {1, 1, 8}, 0.5);
  add("head.attention.in_proj_weight", {24, 8}, 0.35);
  add("head.attention.in_proj_bias", {24}, 0.1);
  linear("head.attention.out_proj", 8, 8);
  norm("head.layernorm");
  linear("head.mlp.fc1", 12, 8);
  linear("head.mlp.fc2", 8, 12);
  return w;
}

// ---- The reference, written out in double for one image. ----

at::Tensor Norm(const at::Tensor& x, Tensors& w, const std::string& name) {
  at::Tensor mean = x.mean(-1, true);
  at::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / (var + 1e-6).sqrt() * w[name + ".weight"] +
         w[name + ".bias"];
}

at::Tensor Lin(const at::Tensor& x, Tensors& w, const std::string& name) {
  return at::matmul(x, w[name + ".weight"].t()) + w[name + ".bias"];
}

at::Tensor GeluTanh(const at::Tensor& x) {
  return 0.5 * x *
         (1 + at::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x.pow(3))));
}

// q [n, 8], k, v [m, 8] -> [n, 8] with 2 heads of 4.
at::Tensor Attend(const at::Tensor& q, const at::Tensor& k,
                  const at::Tensor& v) {
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < 2; ++h) {
    at::Tensor scores =
        at::matmul(q.narrow(1, 4 * h, 4), k.narrow(1, 4 * h, 4).t()) / 2.0;
    heads.push_back(at::matmul(scores.softmax(-1), v.narrow(1, 4 * h, 4)));
  }
  return at::cat(heads, 1);
}

// image [2, 8, 8] -> (last_hidden_state [4, 8], pooler_output [8]).
std::pair<at::Tensor, at::Tensor> Reference(Tensors w,
                                            const at::Tensor& image) {
  for (auto& [name, t] : w) t = t.to(at::kDouble);
  const std::string p = "vision_model.";
  // Patch (r, c) at token r * 2 + c: a dot product with each filter.
  at::Tensor x = at::empty({4, 8}, at::kDouble);
  at::Tensor filters = w[p + "embeddings.patch_embedding.weight"];
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      at::Tensor patch = image.to(at::kDouble)
                             .narrow(1, 4 * r, 4)
                             .narrow(2, 4 * c, 4)
                             .reshape({1, -1});
      x[r * 2 + c] = at::matmul(filters.reshape({8, -1}), patch.t()).flatten() +
                     w[p + "embeddings.patch_embedding.bias"];
    }
  }
  x = x + w[p + "embeddings.position_embedding.weight"];
  const std::string l = p + "encoder.layers.0.";
  at::Tensor n = Norm(x, w, l + "layer_norm1");
  x = x + Lin(Attend(Lin(n, w, l + "self_attn.q_proj"),
                     Lin(n, w, l + "self_attn.k_proj"),
                     Lin(n, w, l + "self_attn.v_proj")),
              w, l + "self_attn.out_proj");
  n = Norm(x, w, l + "layer_norm2");
  x = x + Lin(GeluTanh(Lin(n, w, l + "mlp.fc1")), w, l + "mlp.fc2");
  at::Tensor last = Norm(x, w, p + "post_layernorm");
  const std::string h = p + "head.";
  std::vector<at::Tensor> in_w = w[h + "attention.in_proj_weight"].chunk(3);
  std::vector<at::Tensor> in_b = w[h + "attention.in_proj_bias"].chunk(3);
  at::Tensor probe = w[h + "probe"].view({1, 8});
  at::Tensor pooled = Lin(Attend(at::matmul(probe, in_w[0].t()) + in_b[0],
                                 at::matmul(last, in_w[1].t()) + in_b[1],
                                 at::matmul(last, in_w[2].t()) + in_b[2]),
                          w, h + "attention.out_proj");
  n = Norm(pooled, w, h + "layernorm");
  pooled = pooled + Lin(GeluTanh(Lin(n, w, h + "mlp.fc1")), w, h + "mlp.fc2");
  return {last.to(at::kFloat), pooled.flatten().to(at::kFloat)};
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

TEST(SiglipVisionTest, MatchesReference) {
  Tensors weights = RandomWeights();
  auto model = LoadHfModel(WriteModel(weights, "siglip_ref"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  at::Tensor pixels = at::randn({2, 2, 8, 8});
  auto outputs = (*model)->Forward({{"pixel_values", pixels}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->at("last_hidden_state").sizes(),
            (std::vector<int64_t>{2, 4, 8}));
  ASSERT_EQ(outputs->at("pooler_output").sizes(), (std::vector<int64_t>{2, 8}));
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

TEST(SiglipVisionTest, LoadsKeysWithoutTheVisionModelPrefix) {
  // transformers 5 saves a SiglipVisionModel without "vision_model.".
  Tensors weights = RandomWeights();
  Tensors unprefixed;
  for (const auto& [name, tensor] : weights) {
    unprefixed[name.substr(std::string("vision_model.").size())] = tensor;
  }
  auto model = LoadHfModel(WriteModel(unprefixed, "siglip_unprefixed"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  at::Tensor pixels = at::randn({1, 2, 8, 8});
  auto outputs = (*model)->Forward({{"pixel_values", pixels}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  auto [last, pooled] = Reference(weights, pixels[0]);
  EXPECT_LT(
      test_util::RelativeMaxError(outputs->at("last_hidden_state")[0], last),
      1e-5);
  EXPECT_LT(
      test_util::RelativeMaxError(outputs->at("pooler_output")[0], pooled),
      1e-5);
  // Module names stay transformers' names, whatever the keys.
  bool found = false;
  (*model)->root().Visit([&](Module& module) {
    found = found || module.name() == "vision_model.encoder.layers.0.mlp.fc1";
  });
  EXPECT_TRUE(found);
}

TEST(SiglipVisionTest, FullSiglipConfigAndNoHead) {
  Tensors weights = RandomWeights();
  const std::string config = absl::StrCat(
      R"({"model_type": "siglip", "text_config": {}, "vision_config": )",
      std::string(kConfig).replace(1, 0, R"("vision_use_head": false, )"), "}");
  auto model = LoadHfModel(WriteModel(weights, "siglip_full", config), {},
                           "siglip_vision_model");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->outputs().size(), 1u);
  auto outputs = (*model)->Forward({{"pixel_values", at::randn({1, 2, 8, 8})}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->count("pooler_output"), 0u);
}

// siglip-so400m-patch14-384's image is not a multiple of its patch: the
// patch convolution drops the remainder (here 10 pixels, 2 x 2 patches of 4),
// so the last two rows and columns of pixels never reach the output.
TEST(SiglipVisionTest, ImageSizeNotMultipleOfPatchDropsRemainder) {
  const std::string config = std::string(kConfig).replace(
      std::string(kConfig).find("\"image_size\": 8"),
      std::string("\"image_size\": 8").size(), "\"image_size\": 10");
  auto model =
      LoadHfModel(WriteModel(RandomWeights(), "siglip_crop", config), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->inputs()[0].shape, (std::vector<int64_t>{-1, 2, 10, 10}));
  at::Tensor pixels = at::randn({1, 2, 10, 10});
  at::Tensor changed = pixels.clone();
  changed.narrow(2, 8, 2).fill_(5.0);
  changed.narrow(3, 8, 2).fill_(-5.0);
  auto outputs = (*model)->Forward({{"pixel_values", pixels}});
  auto outputs_changed = (*model)->Forward({{"pixel_values", changed}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_TRUE(outputs_changed.ok()) << outputs_changed.status();
  EXPECT_EQ(outputs->at("last_hidden_state").sizes(),
            (std::vector<int64_t>{1, 4, 8}));
  EXPECT_TRUE(at::equal(outputs->at("last_hidden_state"),
                        outputs_changed->at("last_hidden_state")));
}

// Prefetch follows the tree's order until it has seen a forward: modules
// that run in registration order leave no prefetched copy behind after the
// first forward.
TEST(SiglipVisionTest, FirstPrefetchedForwardLeavesNoComputeCopies) {
  auto policy = casting::CastingPolicy::Create({});
  ASSERT_TRUE(policy.ok()) << policy.status();
  WeightPolicyOptions options;
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  options.casting = *policy;
  options.prefetch = true;
  auto model =
      LoadHfModel(WriteModel(RandomWeights(), "siglip_prefetch"), options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(
      (*model)->Forward({{"pixel_values", at::randn({1, 2, 8, 8})}}).ok());
  std::vector<std::string> left;
  (*model)->root().Visit([&](Module& module) {
    for (const auto& [local_name, weight] : module.weights()) {
      if (weight->footprint().transient_compute_bytes() > 0) {
        left.push_back(module.name() + "." + local_name);
      }
    }
  });
  EXPECT_THAT(left, ::testing::IsEmpty());
}

TEST(SiglipVisionTest, NamesKindsAndInputErrors) {
  auto model = LoadHfModel(WriteModel(RandomWeights(), "siglip_names"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, std::string> kinds;
  (*model)->root().Visit([&](Module& m) { kinds[m.name()] = m.kind(); });
  EXPECT_EQ(kinds["vision_model.head"], "SiglipMultiheadAttentionPoolingHead");
  EXPECT_EQ(kinds["vision_model.head.attention"], "MultiheadAttention");
  EXPECT_EQ(kinds["vision_model.head.attention.out_proj"], "Linear");
  EXPECT_EQ(kinds["vision_model.encoder.layers.0.self_attn"],
            "SiglipAttention");
  EXPECT_EQ(kinds["vision_model.embeddings.patch_embedding"], "Conv2d");
  EXPECT_EQ((*model)->inputs()[0].shape, (std::vector<int64_t>{-1, 2, 8, 8}));
  auto image_size =
      (*model)->Forward({{"pixel_values", at::randn({1, 2, 16, 16})}});
  EXPECT_EQ(image_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(image_size.status().message()),
              HasSubstr("pixel_values"));
  auto dtype = (*model)->Forward(
      {{"pixel_values", at::randn({1, 2, 8, 8}).to(at::kDouble)}});
  EXPECT_THAT(std::string(dtype.status().message()), HasSubstr("dtype"));
  auto empty = (*model)->Forward({{"pixel_values", at::randn({0, 2, 8, 8})}});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  Tensors bad = RandomWeights();
  bad["vision_model.head.probe"] = at::zeros({1, 2, 8});
  EXPECT_THAT(
      std::string(
          LoadHfModel(WriteModel(bad, "siglip_bad"), {}).status().message()),
      HasSubstr("vision_model.head.probe"));
}

// One wrong shape of each kind of weight the tower has, loaded mapped and
// lazily: the error names the tensor, the expected and the found shape.
TEST(SiglipVisionTest, MisshapedWeightsFailAtLoadNamingTheTensor) {
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  const std::pair<const char*, std::vector<int64_t>> cases[] = {
      {"embeddings.patch_embedding.weight", {8, 2, 2, 2}},
      {"embeddings.patch_embedding.bias", {4}},
      {"embeddings.position_embedding.weight", {16, 8}},
      {"encoder.layers.0.layer_norm1.bias", {4}},
      {"encoder.layers.0.self_attn.k_proj.weight", {8, 4}},
      {"encoder.layers.0.mlp.fc2.weight", {12, 8}},
      {"post_layernorm.weight", {16}},
      {"head.probe", {1, 2, 8}},
      {"head.attention.in_proj_weight", {8, 8}},
      {"head.attention.in_proj_bias", {8}},
  };
  for (const auto& [local, shape] : cases) {
    const std::string key = std::string("vision_model.") + local;
    Tensors bad = RandomWeights();
    const std::vector<int64_t> expected = bad.at(key).sizes().vec();
    bad[key] = at::zeros(shape);
    auto model = LoadHfModel(WriteModel(bad, "siglip_misshaped"), mapped);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(model.status().message()),
        HasSubstr(absl::StrCat("weight '", key, "': expected shape [",
                               absl::StrJoin(expected, ", "), "], found [",
                               absl::StrJoin(shape, ", "), "]")));
  }
}

TEST(VisionTowerConfigTest, SizesOutOfRangeFailNamingTheField) {
  auto error = [](const std::string& sizes) {
    auto config = HfConfig::Parse("{" + sizes + "}", "config.json");
    EXPECT_TRUE(config.ok()) << config.status();
    return std::string(
        VisionTowerConfig::FromHf(*config, VisionTowerConfig{}, "gelu")
            .status()
            .message());
  };
  EXPECT_EQ(error(R"("hidden_size": 1000000000)"),
            "config.json: hidden_size is 1000000000, outside [1, 65536]");
  EXPECT_EQ(error(R"("image_size": 1000000)"),
            "config.json: image_size is 1000000, outside [1, 4096]");
  EXPECT_EQ(error(R"("patch_size": 0)"),
            "config.json: patch_size is 0, outside [1, 4096]");
  EXPECT_EQ(error(R"("num_channels": 300)"),
            "config.json: num_channels is 300, outside [1, 16]");
  EXPECT_EQ(error(R"("intermediate_size": 1000000000000)"),
            "config.json: intermediate_size is 1000000000000, outside "
            "[1, 1048576]");
  EXPECT_THAT(error(R"("image_size": 8, "patch_size": 16)"),
              HasSubstr("be at least patch_size (16)"));
  EXPECT_THAT(error(R"("num_attention_heads": 5)"),
              HasSubstr("must divide by num_attention_heads (5)"));
}

// ---- Fixtures recorded with transformers, for SigLIP and CLIP ----

constexpr const char* kOutputs[] = {"last_hidden_state", "pooler_output"};

class VisionFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = "models/testdata/" + GetParam();
    auto reference =
        test_util::ReadSafetensors(folder_ + "/reference.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
  }

  NamedTensors Run(const WeightPolicyOptions& options) {
    auto model = LoadHfModel(folder_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return {};
    auto outputs = (*model)->Forward(
        {{"pixel_values", reference_.at("input.pixel_values")}});
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    return outputs.ok() ? *outputs : NamedTensors{};
  }

  static WeightPolicyOptions Casting(const std::string& format,
                                     casting::ElementType compute) {
    auto storage = casting::StorageFormat::Parse(format);
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
};

TEST_P(VisionFixtureTest, F32MatchesTransformers) {
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  WeightPolicyOptions streamed = mapped;
  streamed.compute_copy = casting::ComputeCopyPolicy::kTransient;
  streamed.prefetch = true;
  WeightPolicyOptions eager;
  eager.eager = true;
  for (const WeightPolicyOptions& options :
       {WeightPolicyOptions{}, mapped, streamed, eager}) {
    NamedTensors outputs = Run(options);
    for (const char* name : kOutputs) {
      const double error = test_util::RelativeMaxError(
          outputs.at(name), reference_.at(absl::StrCat("output.", name)));
      EXPECT_LE(error, 1e-4) << name;
      std::cout << GetParam() << " f32 " << name << " max rel error " << error
                << "\n";
    }
  }
}

TEST_P(VisionFixtureTest, LayerwiseCastingMatchesRoundTripReference) {
  std::map<std::string, double> cosine;  // By format + output.
  for (const std::string& format : test_util::CastFormatNames()) {
    NamedTensors outputs = Run(Casting(format, casting::ElementType::kF32));
    for (const char* name : kOutputs) {
      const double error = test_util::RelativeMaxError(
          outputs.at(name),
          reference_.at(absl::StrCat("roundtrip.", format, ".output.", name)));
      EXPECT_LE(error, 1e-4) << format << " " << name;
      const std::string key = absl::StrCat(format, " ", name);
      cosine[key] = test_util::CosineSimilarity(
          outputs.at(name), reference_.at(absl::StrCat("output.", name)));
      std::cout << GetParam() << " " << key << " max rel error vs roundtrip "
                << error << ", cosine vs f32 reference " << cosine[key] << "\n";
    }
  }
  // Scaled fp8 is at least as accurate as the plain cast.
  for (const std::string fp8 : {"F8_E4M3FN", "F8_E5M2"}) {
    for (const std::string name : kOutputs) {
      const double plain = cosine[fp8 + " " + name];
      EXPECT_GE(cosine[fp8 + ":per_row " + name], plain) << fp8 << name;
      EXPECT_GE(cosine[fp8 + ":per_tensor " + name], plain) << fp8 << name;
    }
  }
}

TEST_P(VisionFixtureTest, Bf16ComputeIsClose) {
  WeightPolicyOptions bf16;
  bf16.compute_dtype = casting::ElementType::kBF16;
  NamedTensors outputs = Run(bf16);
  for (const char* name : kOutputs) {
    const double cosine = test_util::CosineSimilarity(
        outputs.at(name), reference_.at(absl::StrCat("output.", name)));
    EXPECT_GE(cosine, 0.999) << name;
    std::cout << GetParam() << " bf16 compute " << name << " cosine " << cosine
              << "\n";
  }
  for (const std::string& format : test_util::CastFormatNames()) {
    NamedTensors cast = Run(Casting(format, casting::ElementType::kBF16));
    for (const char* name : kOutputs) {
      const double cosine = test_util::CosineSimilarity(
          cast.at(name),
          reference_.at(absl::StrCat("roundtrip.", format, ".output.", name)));
      EXPECT_GE(cosine, 0.999) << format << " " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VisionFixtureTest,
                         ::testing::Values("siglip_vision", "clip_vision"));

}  // namespace
}  // namespace castserve::models
