#include "server/lifecycle/model_config_loader.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;

std::string ReadSample() {
  std::FILE* file =
      std::fopen("server/lifecycle/testdata/sample_config.pbtxt", "rb");
  EXPECT_NE(file, nullptr);
  std::string text;
  char buffer[4096];
  size_t n;
  while (file && (n = std::fread(buffer, 1, sizeof buffer, file)) > 0) {
    text.append(buffer, n);
  }
  if (file) std::fclose(file);
  return text;
}

TEST(ModelConfigLoaderTest, SampleConfigFillsEveryCastserveSetting) {
  absl::StatusOr<inference::ModelConfig> config =
      ParseModelConfig(ReadSample(), "minilm");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "minilm");
  EXPECT_EQ(config->max_batch_size(), 8);
  ASSERT_EQ(config->input_size(), 2);
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_INT64);
  EXPECT_EQ(config->output(0).dims(1), 384);
  EXPECT_EQ(config->instance_group(0).count(), 2);
  EXPECT_EQ(config->dynamic_batching().max_queue_delay_microseconds(), 2000u);
  EXPECT_EQ(config->checkpoint().path(), "hf");
  EXPECT_EQ(config->architecture(), "bert");
  EXPECT_EQ(config->load_policy(), inference::LOAD_POLICY_FIRST_REQUEST);
  const inference::WeightPolicy& weights = config->weights();
  EXPECT_EQ(weights.compute_copy(), inference::COMPUTE_COPY_TRANSIENT);
  EXPECT_TRUE(weights.prefetch());
  EXPECT_EQ(weights.casting().storage_dtype(),
            inference::STORAGE_DTYPE_F8_E4M3FN);
  EXPECT_EQ(weights.casting().compute_dtype(), inference::COMPUTE_DTYPE_BF16);
  EXPECT_EQ(weights.casting().scaling(), inference::SCALING_PER_ROW);
  EXPECT_EQ(weights.casting().skip_modules_pattern(0), "pooler");
  EXPECT_EQ(config->model_warmup(0).inputs().at("input_ids").dims(0), 8);
  EXPECT_EQ(config->tiers().keep_alive(), "5m");
  EXPECT_EQ(config->tiers().pin(), inference::MEMORY_TIER_WARM);
  EXPECT_EQ(config->tiers().priority(), 10);
}

TEST(ModelConfigLoaderTest, EmptyNameTakesTheDirectoryName) {
  absl::StatusOr<inference::ModelConfig> config =
      ParseModelConfig("max_batch_size: 1", "bert");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "bert");
}

TEST(ModelConfigLoaderTest, SyntaxErrorsNameLineAndColumn) {
  absl::StatusOr<inference::ModelConfig> config =
      ParseModelConfig("name: \"m\"\nmax_batch_size: eight\n", "m");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("config.pbtxt:2:17"));
}

TEST(ModelConfigLoaderTest, UnknownFieldIsAnError) {
  absl::StatusOr<inference::ModelConfig> config =
      ParseModelConfig("max_batch: 1", "m");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("max_batch"));
}

TEST(ModelConfigLoaderTest, SemanticErrorsAreReported) {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"name: \"other\"", "does not match the directory name"},
      {"max_batch_size: -1", "max_batch_size must be >= 0"},
      {"instance_group { count: -2 }", "instance_group.count"},
      {"dynamic_batching {}", "dynamic_batching needs max_batch_size > 0"},
      {"max_batch_size: 4 dynamic_batching { preferred_batch_size: 8 }",
       "preferred_batch_size 8"},
      {"weights { casting { compute_dtype: COMPUTE_DTYPE_BF16 } }",
       "storage_dtype must be set"},
      {"weights { casting { storage_dtype: STORAGE_DTYPE_BF16 "
       "scaling: SCALING_PER_ROW } }",
       "scaling applies only to fp8"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<inference::ModelConfig> config =
        ParseModelConfig(c.text, "m");
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(config.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(ModelConfigLoaderTest, GenerationBlockIsCheckedAndDefaulted) {
  absl::StatusOr<inference::ModelConfig> config = ParseModelConfig(
      "architecture: \"llama\" generation { kv_cache_bytes: 1048576 "
      "max_sequences: 4 }",
      "m");
  ASSERT_TRUE(config.ok()) << config.status();
  const inference::GenerationConfig generation =
      WithGenerationDefaults(config->generation());
  EXPECT_EQ(generation.kv_cache_bytes(), 1048576);
  EXPECT_EQ(generation.kv_block_tokens(), 16);
  EXPECT_EQ(generation.max_sequences(), 4);
  EXPECT_EQ(generation.max_waiting(), 64);
  EXPECT_EQ(generation.default_max_tokens(), 16);

  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"generation {}", "generation.kv_cache_bytes must be > 0"},
      {"generation { kv_cache_bytes: -5 }", "generation.kv_cache_bytes"},
      {"generation { kv_cache_bytes: 9223372036854775807 }",
       "generation.kv_cache_bytes must be at most 1099511627776 (1 TiB), got "
       "9223372036854775807"},
      {"max_batch_size: 4 generation { kv_cache_bytes: 1 }",
       "max_batch_size must be 0"},
      {"generation { kv_cache_bytes: 1 kv_block_tokens: -1 }",
       "generation.kv_block_tokens must be in 0..4096, got -1"},
      {"generation { kv_cache_bytes: 1 max_sequences: 100000 }",
       "generation.max_sequences must be in 0..1024"},
      {"generation { kv_cache_bytes: 1 max_waiting: -1 }",
       "generation.max_waiting"},
      {"generation { kv_cache_bytes: 1 default_max_tokens: 2000000 }",
       "generation.default_max_tokens must be in 0..1048576"},
      {"generation { kv_cache_bytes: 1 } model_warmup { name: \"w\" }",
       "model_warmup is not supported with generation"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<inference::ModelConfig> refused =
        ParseModelConfig(c.text, "m");
    ASSERT_FALSE(refused.ok()) << c.text;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), HasSubstr(c.message)) << c.text;
  }
}

}  // namespace
TEST(ModelConfigLoaderTest, BadKeepAliveIsRefusedNamingTheFieldAndText) {
  absl::StatusOr<inference::ModelConfig> config =
      ParseModelConfig("tiers { keep_alive: \"a while\" }", "m", "m.pbtxt");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("tiers.keep_alive 'a while'"),
            std::string::npos)
      << config.status();
}

}  // namespace castserve
