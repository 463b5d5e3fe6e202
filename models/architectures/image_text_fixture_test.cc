// The full contrastive image-text models (CLIPModel, SiglipModel) against
// fixtures transformers 5 wrote (tools/gen_clip_fixtures.py):
// image_embeds and text_embeds equal get_image_features /
// get_text_features under resident, mapped and eager f32 policies and
// under fp8 layerwise casting (against the round-tripped reference); a
// request with images only, text only or both; CLIP's two end-of-text
// rules; SigLIP's own padding; and what a load or a request refuses.
#include <ATen/ATen.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/casting_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/loading/model_loader.h"
#include "models/test_util/tensor_files.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

constexpr char kCastFormat[] = "F8_E4M3FN:per_row";
constexpr char kClip[] = "models/testdata/clip";
constexpr char kSiglip[] = "models/testdata/siglip";

Tensors Reference(const std::string& folder) {
  auto reference =
      test_util::ReadSafetensors(folder + "/reference.safetensors");
  EXPECT_TRUE(reference.ok()) << reference.status();
  return reference.ok() ? *std::move(reference) : Tensors{};
}

// The reference's inputs under `prefix` ("input.", "unpadded.input.").
NamedTensors Inputs(const Tensors& reference, const std::string& prefix,
                    const std::vector<std::string>& names) {
  NamedTensors inputs;
  for (const std::string& name : names) {
    auto it = reference.find(prefix + name);
    if (it != reference.end()) inputs[name] = it->second;
  }
  return inputs;
}

NamedTensors AllInputs(const Tensors& reference) {
  return Inputs(reference, "input.",
                {"pixel_values", "input_ids", "attention_mask"});
}

WeightPolicyOptions Casting() {
  auto storage = casting::StorageFormat::Parse(kCastFormat);
  EXPECT_TRUE(storage.ok()) << storage.status();
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = storage->element;
  policy.scaling = storage->scaling;
  policy.compute_dtype = casting::ElementType::kF32;
  WeightPolicyOptions options;
  options.compute_copy = casting::ComputeCopyPolicy::kTransient;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.prefetch = true;
  return options;
}

std::vector<WeightPolicyOptions> PlainPolicies() {
  WeightPolicyOptions mapped;
  mapped.residency = casting::Residency::kMapped;
  WeightPolicyOptions eager;
  eager.eager = true;
  return {WeightPolicyOptions{}, mapped, eager};
}

NamedTensors Infer(const Model& model, const NamedTensors& inputs) {
  auto outputs = model.Forward(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? *std::move(outputs) : NamedTensors{};
}

void ExpectNear(const NamedTensors& out, const Tensors& reference,
                const std::string& prefix, const std::string& name,
                double tolerance = 1e-4) {
  ASSERT_TRUE(out.count(name)) << name;
  EXPECT_LE(
      test_util::RelativeMaxError(out.at(name), reference.at(prefix + name)),
      tolerance)
      << prefix << name;
}

class ImageTextFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageTextFixtureTest, MatchesTransformersImagesTextOrBoth) {
  const Tensors reference = Reference(GetParam());
  const NamedTensors all = AllInputs(reference);
  for (const WeightPolicyOptions& options : PlainPolicies()) {
    auto model = LoadHfModel(GetParam(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    NamedTensors both = Infer(**model, all);
    EXPECT_EQ(both.size(), 2u);
    ExpectNear(both, reference, "output.", "image_embeds");
    ExpectNear(both, reference, "output.", "text_embeds");
    NamedTensors images =
        Infer(**model, {{"pixel_values", all.at("pixel_values")}});
    EXPECT_EQ(images.size(), 1u);
    ExpectNear(images, reference, "output.", "image_embeds");
    NamedTensors text_inputs = all;
    text_inputs.erase("pixel_values");
    NamedTensors texts = Infer(**model, text_inputs);
    EXPECT_EQ(texts.size(), 1u);
    ExpectNear(texts, reference, "output.", "text_embeds");
  }
}

TEST_P(ImageTextFixtureTest, LayerwiseFp8MatchesRoundTripReference) {
  const Tensors reference = Reference(GetParam());
  auto model = LoadHfModel(GetParam(), Casting());
  ASSERT_TRUE(model.ok()) << model.status();
  // Twice: the second forward runs on what the first prefetch learned.
  for (int pass = 0; pass < 2; ++pass) {
    NamedTensors out = Infer(**model, AllInputs(reference));
    const std::string prefix =
        absl::StrCat("roundtrip.", kCastFormat, ".output.");
    ExpectNear(out, reference, prefix, "image_embeds");
    ExpectNear(out, reference, prefix, "text_embeds");
  }
  // The towers' layers and the projections are cast; norms and the SigLIP
  // probe are not.
  bool cast_text_layer = false;
  bool cast_norm = false;
  (*model)->root().Visit([&](Module& module) {
    for (const auto& [local, weight] : module.weights()) {
      const bool cast =
          weight->storage_format().has_value() &&
          weight->storage_format()->element != casting::ElementType::kF32;
      if (module.name() == "text_model.encoder.layers.0.mlp.fc1") {
        cast_text_layer = cast;
      }
      if (module.name() == "text_model.final_layer_norm") cast_norm = cast;
    }
  });
  EXPECT_TRUE(cast_text_layer);
  EXPECT_FALSE(cast_norm);
}

TEST_P(ImageTextFixtureTest, SignatureHasOptionalInputsAndBothEmbeddings) {
  auto model = LoadHfModel(GetParam(), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), GetParam() == kClip ? "clip" : "siglip");
  ASSERT_EQ((*model)->inputs().size(), 3u);
  for (const TensorSpec& spec : (*model)->inputs()) {
    EXPECT_TRUE(spec.optional) << spec.name;
  }
  EXPECT_EQ((*model)->inputs()[0].shape, (std::vector<int64_t>{-1, 3, 32, 32}));
  ASSERT_EQ((*model)->outputs().size(), 2u);
  const int64_t dim = GetParam() == kClip ? 16 : 32;
  EXPECT_EQ((*model)->outputs()[0].name, "image_embeds");
  EXPECT_EQ((*model)->outputs()[0].shape, (std::vector<int64_t>{-1, dim}));
  EXPECT_EQ((*model)->outputs()[1].name, "text_embeds");
  EXPECT_EQ((*model)->outputs()[1].shape, (std::vector<int64_t>{-1, dim}));
  EXPECT_EQ((*model)->max_sequence_length(), 16);
}

TEST_P(ImageTextFixtureTest, RefusesRequestsItCannotAnswer) {
  auto model = LoadHfModel(GetParam(), {});
  ASSERT_TRUE(model.ok()) << model.status();
  const Tensors reference = Reference(GetParam());
  const at::Tensor ids = reference.at("input.input_ids");
  auto message = [&](const NamedTensors& inputs) {
    auto out = (*model)->Forward(inputs);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument)
        << out.status();
    return std::string(out.status().message());
  };
  EXPECT_THAT(message({}), HasSubstr("neither 'pixel_values'"));
  EXPECT_THAT(message({{"attention_mask", at::ones_like(ids)}}),
              HasSubstr("'attention_mask' needs 'input_ids'"));
  EXPECT_THAT(message({{"input_ids", ids},
                       {"pixel_values",
                        reference.at("input.pixel_values").slice(0, 0, 2)}}),
              HasSubstr("share the batch dimension"));
  EXPECT_THAT(message({{"input_ids", at::zeros({1, 17}, at::kLong)}}),
              HasSubstr("more than the text position table's 16"));
  EXPECT_THAT(message({{"input_ids", ids + 1000}}),
              HasSubstr("(the vocabulary)"));
  EXPECT_THAT(message({{"input_ids", ids}, {"attention_mask", ids * 0 + 2}}),
              HasSubstr("other than 0 or 1"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ImageTextFixtureTest,
                         ::testing::Values(kClip, kSiglip));

// SigLIP pads each text to max_position_embeddings itself when given an
// attention_mask: the texts padded to the batch's longest give the
// embeddings of the same texts padded to 16 (what SigLIP's processor makes
// and the reference ran).
TEST(SiglipTest, MaskedTextsArePaddedToTheTrainedLength) {
  const Tensors reference = Reference(kSiglip);
  auto model = LoadHfModel(kSiglip, {});
  ASSERT_TRUE(model.ok()) << model.status();
  const NamedTensors unpadded =
      Inputs(reference, "unpadded.input.", {"input_ids", "attention_mask"});
  ASSERT_LT(unpadded.at("input_ids").size(1), 16);
  ExpectNear(Infer(**model, unpadded), reference, "output.", "text_embeds");
  // One text alone, without any padding, embeds as in the batch.
  const int64_t length = unpadded.at("attention_mask")[2].sum().item<int64_t>();
  NamedTensors alone = {
      {"input_ids",
       unpadded.at("input_ids").slice(0, 2, 3).narrow(1, 0, length)},
      {"attention_mask", at::ones({1, length}, at::kLong)}};
  EXPECT_LE(test_util::RelativeMaxError(
                Infer(**model, alone).at("text_embeds"),
                reference.at("output.text_embeds").slice(0, 2, 3)),
            1e-4);
  // Without a mask the ids run as given: the unpadded batch's last
  // positions are other tokens, and the embeddings differ.
  NamedTensors ids_only = {{"input_ids", unpadded.at("input_ids")}};
  EXPECT_GT(
      test_util::RelativeMaxError(Infer(**model, ids_only).at("text_embeds"),
                                  reference.at("output.text_embeds")),
      1e-2);
}

// A copy of `from` whose config.json has `before` replaced by `after`.
std::string EditedConfig(const std::string& from, const std::string& name,
                         const std::string& before, const std::string& after,
                         const Tensors& extra = {}) {
  auto weights = test_util::ReadSafetensors(from + "/model.safetensors");
  EXPECT_TRUE(weights.ok()) << weights.status();
  for (const auto& [key, tensor] : extra) (*weights)[key] = tensor;
  const std::string folder = test_util::MakeScratchDir(name);
  EXPECT_TRUE(
      test_util::WriteSafetensors(folder + "/model.safetensors", *weights)
          .ok());
  std::ifstream in(from + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const size_t at = config.find(before);
  EXPECT_NE(at, std::string::npos) << before;
  if (at != std::string::npos) config.replace(at, before.size(), after);
  std::ofstream(folder + "/config.json") << config;
  return folder;
}

// transformers pools CLIP's first eos_token_id, except where the config
// says eos_token_id 2: then the highest id of the row.
TEST(ClipTest, EndOfTextRuleFollowsTheConfig) {
  const Tensors reference = Reference(kClip);
  const NamedTensors texts =
      Inputs(reference, "input.", {"input_ids", "attention_mask"});
  auto legacy =
      LoadHfModel(EditedConfig(kClip, "clip_legacy_eos", "\"eos_token_id\": 1",
                               "\"eos_token_id\": 2"),
                  {});
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  ExpectNear(Infer(**legacy, texts), reference, "legacy.output.",
             "text_embeds");
  // A row without the end-of-text token has no embedding.
  auto model = LoadHfModel(kClip, {});
  ASSERT_TRUE(model.ok()) << model.status();
  at::Tensor ids = texts.at("input_ids").clone();
  ids[1].masked_fill_(ids[1].eq(1), 3);
  auto out = (*model)->Forward({{"input_ids", ids}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("row 1 holds no end-of-text token (eos_token_id 1)"));
}

TEST(ImageTextRefusalTest, NamesWhatItDoesNotUnderstand) {
  auto extra = LoadHfModel(
      EditedConfig(kSiglip, "siglip_extra", "\"model_type\": \"siglip\"",
                   "\"model_type\": \"siglip\"",
                   {{"text_model.extra.weight", at::ones({2})}}),
      {});
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(extra.status().message(),
              HasSubstr("does not read: text_model.extra.weight"));
  auto no_head = LoadHfModel(
      EditedConfig(kSiglip, "siglip_no_head", "\"vision_use_head\": true",
                   "\"vision_use_head\": false"),
      {});
  EXPECT_THAT(no_head.status().message(), HasSubstr("vision_use_head"));
  auto projection = LoadHfModel(
      EditedConfig(kClip, "clip_projection", "\"projection_dim\": 16",
                   "\"projection_dim\": 0"),
      {});
  EXPECT_THAT(projection.status().message(), HasSubstr("projection_dim is 0"));
}

}  // namespace
}  // namespace castserve::models
