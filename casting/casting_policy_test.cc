#include "casting/casting_policy.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "casting/codec/storage_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string name;
  std::string kind;
  bool cast;
  std::string reason_part;
};

CastingPolicy MakePolicy(CastingPolicy::Options options) {
  absl::StatusOr<CastingPolicy> policy = CastingPolicy::Create(options);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *std::move(policy);
}

void ExpectDecisions(const CastingPolicy& policy,
                     const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const WeightDecision decision = policy.Decide(c.name, c.kind);
    EXPECT_EQ(decision.cast, c.cast)
        << c.name << " (" << c.kind << "): " << decision.reason;
    EXPECT_THAT(decision.reason, HasSubstr(c.reason_part)) << c.name;
  }
}

TEST(CastingPolicyTest, DefaultsOnRealisticModuleNames) {
  const CastingPolicy policy = MakePolicy({});
  ExpectDecisions(
      policy,
      {
          // BERT
          {"encoder.layer.3.attention.self.query", "Linear", true, "castable"},
          {"encoder.layer.3.attention.output.LayerNorm", "LayerNorm", false,
           "normalization"},
          {"embeddings.LayerNorm", "LayerNorm", false, "normalization"},
          {"embeddings.word_embeddings", "Embedding", true, "castable"},
          {"encoder.layer.3.intermediate.intermediate_act_fn", "GELU", false,
           "kind GELU is not a castable layer kind"},
          // SigLIP vision: `patch_embed` is a substring of `patch_embedding`.
          {"vision_model.embeddings.patch_embedding", "Conv2d", false,
           "matches skip pattern 'patch_embed'"},
          {"vision_model.embeddings.position_embedding", "Embedding", true,
           "castable"},
          {"vision_model.post_layernorm", "LayerNorm", false, "normalization"},
          {"vision_model.encoder.layers.0.mlp.fc1", "Linear", true, "castable"},
          // diffusers: anchored patterns only match the top-level module.
          {"proj_in", "Linear", false, "matches skip pattern '^proj_in$'"},
          {"proj_out", "Conv2d", false, "matches skip pattern '^proj_out$'"},
          {"transformer_blocks.0.proj_in", "Linear", true, "castable"},
          {"pos_embed.proj", "Conv2d", false, "'pos_embed'"},
          {"transformer_blocks.0.norm1.linear", "Linear", false,
           "matches skip pattern 'norm'"},
          {"transformer_blocks.0.attn1.to_q", "Linear", true, "castable"},
          {"conv_in", "ConvTranspose2d", true, "castable"},
          // Llama
          {"model.layers.0.input_layernorm", "RMSNorm", false, "normalization"},
          {"model.layers.0.self_attn.q_proj", "Linear", true, "castable"},
          {"model.norm", "RMSNorm", false, "normalization"},
          {"lm_head", "Linear", true, "castable"},
      });
}

TEST(CastingPolicyTest, CastDecisionCarriesOptions) {
  CastingPolicy::Options options;
  options.storage_dtype = ElementType::kF8E5M2;
  options.compute_dtype = ElementType::kF32;
  options.scaling = Scaling::kPerRow;
  const CastingPolicy policy = MakePolicy(options);

  const WeightDecision cast = policy.Decide("lm_head", "Linear");
  EXPECT_TRUE(cast.cast);
  EXPECT_EQ(cast.storage.element, ElementType::kF8E5M2);
  EXPECT_EQ(cast.storage.scaling, Scaling::kPerRow);
  EXPECT_EQ(cast.compute_dtype, ElementType::kF32);

  const WeightDecision kept = policy.Decide("model.norm", "RMSNorm");
  EXPECT_FALSE(kept.cast);
  EXPECT_EQ(kept.storage, StorageFormat::Plain(ElementType::kF32));
  EXPECT_EQ(kept.compute_dtype, ElementType::kF32);
}

TEST(CastingPolicyTest, PatternOnAncestorSkipsDescendants) {
  const CastingPolicy policy = MakePolicy({});
  ExpectDecisions(policy,
                  {
                      {"proj_in.0", "Linear", false, "'^proj_in$'"},
                      {"proj_out.conv.1", "Conv2d", false, "'^proj_out$'"},
                      {"proj_input", "Linear", true, "castable"},
                  });
}

TEST(CastingPolicyTest, NoPatternsStillKeepsNormalizationLayers) {
  CastingPolicy::Options options;
  options.skip_modules_pattern = {};
  const CastingPolicy policy = MakePolicy(options);
  ExpectDecisions(
      policy,
      {
          {"norm_proj", "Linear", true, "castable"},
          {"proj_in", "Linear", true, "castable"},
          {"embeddings.patch_embedding", "Conv2d", true, "castable"},
          {"model.layers.0.input_layernorm", "RMSNorm", false, "normalization"},
          {"gn", "GroupNorm", false, "normalization"},
          {"bn", "BatchNorm2d", false, "normalization"},
          {"ada", "AdaLayerNormZero", false, "normalization"},
      });
}

TEST(CastingPolicyTest, CustomPatternsAndSkipClasses) {
  CastingPolicy::Options options;
  options.skip_modules_pattern = {R"(layers\.(0|31)\.)", "lm_head$"};
  options.skip_modules_classes = {"Embedding", "Conv1d"};
  const CastingPolicy policy = MakePolicy(options);
  ExpectDecisions(
      policy, {
                  {"model.layers.0.mlp.up_proj", "Linear", false,
                   R"(matches skip pattern 'layers\.(0|31)\.')"},
                  {"model.layers.31.mlp.up_proj", "Linear", false, "layers"},
                  {"model.layers.1.mlp.up_proj", "Linear", true, "castable"},
                  {"model.layers.10.mlp.up_proj", "Linear", true, "castable"},
                  {"lm_head", "Linear", false, "'lm_head$'"},
                  {"model.embed_tokens", "Embedding", false,
                   "kind Embedding is in skip_modules_classes"},
                  {"conv", "Conv1d", false, "skip_modules_classes"},
                  // Default patterns are replaced, not extended.
                  {"model.norm_proj", "Linear", true, "castable"},
              });
}

TEST(CastingPolicyTest, KindNamesAreExact) {
  const CastingPolicy policy = MakePolicy({});
  EXPECT_FALSE(policy.Decide("a", "linear").cast);
  EXPECT_FALSE(policy.Decide("a", "Linear8bit").cast);
  EXPECT_TRUE(policy.Decide("a", "ConvTranspose3d").cast);
  EXPECT_TRUE(CastingPolicy::IsNormalizationKind("LayerNorm"));
  EXPECT_FALSE(CastingPolicy::IsNormalizationKind("Linear"));
}

TEST(CastingPolicyTest, InvalidRegexNamesThePattern) {
  CastingPolicy::Options options;
  options.skip_modules_pattern = {"ok", "bad(["};
  absl::StatusOr<CastingPolicy> policy = CastingPolicy::Create(options);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(),
              HasSubstr("skip_modules_pattern[1] 'bad(['"));
}

// std::regex compiles by recursive descent: a pattern of 30,000 nested
// groups (60 KB, one RepositoryModelLoad config) overflowed the stack and
// ended the daemon. Patterns are bounded in length and number before any
// is compiled.
TEST(CastingPolicyTest, PatternsAreBoundedBeforeCompiling) {
  CastingPolicy::Options deep;
  deep.skip_modules_pattern = {std::string(30000, '(') + "a" +
                               std::string(30000, ')')};
  const absl::Status deep_error = CastingPolicy::Create(deep).status();
  EXPECT_EQ(deep_error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(deep_error.message(),
              HasSubstr("skip_modules_pattern[0] is 60001 characters, above "
                        "the limit of 256"));

  CastingPolicy::Options longest;
  longest.skip_modules_pattern = {std::string(256, 'a')};
  EXPECT_TRUE(CastingPolicy::Create(longest).ok());

  CastingPolicy::Options many;
  many.skip_modules_pattern.assign(65, "pooler");
  const absl::Status many_error = CastingPolicy::Create(many).status();
  EXPECT_EQ(many_error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(many_error.message(),
              HasSubstr("65 skip_modules_pattern entries, above the limit "
                        "of 64"));
}

// Found by server/fuzz/config_json_fuzzer (UBSan): libstdc++'s std::regex
// reads a back-reference's or a repeat count's digits into a long without
// checking, so "\\1111..." of 20 digits overflowed it.
TEST(CastingPolicyTest, NumbersInPatternsHaveAtMostNineDigits) {
  for (const char* pattern :
       {"a\\11111111111111111111", "a{99999999999}", "layer\\.1234567890"}) {
    CastingPolicy::Options options;
    options.skip_modules_pattern = {pattern};
    const absl::Status error = CastingPolicy::Create(options).status();
    EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << pattern;
    EXPECT_THAT(error.message(),
                HasSubstr("has a number of more than 9 digits"))
        << pattern;
  }
  CastingPolicy::Options nine;
  nine.skip_modules_pattern = {"layer\\.123456789", "a{1,999}"};
  EXPECT_TRUE(CastingPolicy::Create(nine).ok());
}

TEST(CastingPolicyTest, RejectsInvalidOptions) {
  CastingPolicy::Options fp8_compute;
  fp8_compute.compute_dtype = ElementType::kF8E4M3FN;
  const absl::Status fp8_compute_error =
      CastingPolicy::Create(fp8_compute).status();
  EXPECT_EQ(fp8_compute_error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fp8_compute_error.message(),
              HasSubstr("compute dtype F8_E4M3FN"));

  CastingPolicy::Options scaled_bf16;
  scaled_bf16.storage_dtype = ElementType::kBF16;
  scaled_bf16.scaling = Scaling::kPerTensor;
  const absl::Status scaled_bf16_error =
      CastingPolicy::Create(scaled_bf16).status();
  EXPECT_EQ(scaled_bf16_error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(scaled_bf16_error.message(),
              HasSubstr("scaling per_tensor needs an fp8 storage dtype, got "
                        "BF16"));

  CastingPolicy::Options empty_pattern;
  empty_pattern.skip_modules_pattern = {""};
  EXPECT_EQ(CastingPolicy::Create(empty_pattern).status().code(),
            absl::StatusCode::kInvalidArgument);

  CastingPolicy::Options empty_class;
  empty_class.skip_modules_classes = {""};
  EXPECT_EQ(CastingPolicy::Create(empty_class).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CastingPolicyTest, WiderStorageThanComputeIsAllowed) {
  CastingPolicy::Options options;
  options.storage_dtype = ElementType::kF32;
  options.compute_dtype = ElementType::kBF16;
  EXPECT_TRUE(CastingPolicy::Create(options).ok());
}

}  // namespace
}  // namespace castserve::casting
