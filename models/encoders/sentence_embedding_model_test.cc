#include "models/encoders/sentence_embedding_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "models/loading/model_loader.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve::models {
namespace {

using ::testing::HasSubstr;

constexpr char kBert[] = "models/testdata/bert";  // hidden_size 32.

constexpr char kModules[] = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
])";
constexpr char kMeanPooling[] =
    R"({"word_embedding_dimension": 32, "pooling_mode_cls_token": false,
        "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false,
        "pooling_mode_mean_sqrt_len_tokens": false,
        "pooling_mode_weightedmean_tokens": false,
        "pooling_mode_lasttoken": false, "include_prompt": true})";

// The BERT fixture with sentence-transformers files laid over it in memory.
class SentenceEmbeddingModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> real =
        platform::FileSystem::Default()->RealPath(kBert);
    ASSERT_TRUE(real.ok()) << real.status();
    folder_ = *real;
  }

  void Add(const std::string& name, const std::string& contents) {
    files_.AddFile(folder_ + "/" + name, contents);
  }
  void AddPipeline(const std::string& modules = kModules,
                   const std::string& pooling = kMeanPooling) {
    Add("modules.json", modules);
    Add("1_Pooling/config.json", pooling);
  }
  absl::StatusOr<std::unique_ptr<Model>> Load() {
    return LoadHfModel(folder_, {}, "", &files_);
  }
  std::string LoadError() {
    absl::StatusOr<std::unique_ptr<Model>> model = Load();
    EXPECT_FALSE(model.ok());
    if (model.ok()) return "";
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument)
        << model.status();
    return std::string(model.status().message());
  }

  std::string folder_;
  platform::FakeFileSystem files_{platform::FileSystem::Default()};
};

NamedTensors TwoSentences() {
  return {
      {"input_ids",
       at::tensor({2, 17, 45, 9, 3, 2, 60, 3, 0, 0}, at::kLong).view({2, 5})},
      {"attention_mask",
       at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, at::kLong).view({2, 5})}};
}

at::Tensor MaskedMean(const at::Tensor& hidden, const at::Tensor& mask) {
  at::Tensor weights = mask.to(at::kFloat).unsqueeze(-1);
  return (hidden * weights).sum(1) / weights.sum(1);
}

TEST_F(SentenceEmbeddingModelTest, FolderWithoutModulesJsonIsUnchanged) {
  absl::StatusOr<std::unique_ptr<Model>> model = Load();
  ASSERT_TRUE(model.ok()) << model.status();
  for (const TensorSpec& spec : (*model)->outputs()) {
    EXPECT_NE(spec.name, kSentenceEmbeddingOutput);
  }
  EXPECT_EQ((*model)->max_sequence_length(), 64);  // The position table.
}

TEST_F(SentenceEmbeddingModelTest, MeanPoolsThenNormalizes) {
  AddPipeline();
  Add("sentence_bert_config.json",
      R"({"max_seq_length": 16, "do_lower_case": false})");
  absl::StatusOr<std::unique_ptr<Model>> model = Load();
  ASSERT_TRUE(model.ok()) << model.status();
  const TensorSpec& added = (*model)->outputs().back();
  EXPECT_EQ(added.name, kSentenceEmbeddingOutput);
  EXPECT_EQ(added.shape, (std::vector<int64_t>{-1, 32}));
  EXPECT_EQ((*model)->max_sequence_length(), 16);

  const NamedTensors inputs = TwoSentences();
  absl::StatusOr<NamedTensors> outputs = (*model)->Forward(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const at::Tensor mean =
      MaskedMean(outputs->at("last_hidden_state"), inputs.at("attention_mask"));
  const at::Tensor expected = mean / mean.norm(2, 1, true);
  const at::Tensor& embedding = outputs->at(kSentenceEmbeddingOutput);
  ASSERT_EQ(embedding.sizes(), expected.sizes());
  EXPECT_TRUE(at::allclose(embedding, expected, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(embedding.norm(2, 1), at::ones({2}), 1e-5));
}

TEST_F(SentenceEmbeddingModelTest, WithoutNormalizeTheMeanIsServedAsItIs) {
  AddPipeline(R"([
    {"path": "", "type": "sentence_transformers.models.Transformer"},
    {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  absl::StatusOr<std::unique_ptr<Model>> model = Load();
  ASSERT_TRUE(model.ok()) << model.status();
  const NamedTensors inputs = TwoSentences();
  absl::StatusOr<NamedTensors> outputs = (*model)->Forward(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_TRUE(at::allclose(
      outputs->at(kSentenceEmbeddingOutput),
      MaskedMean(outputs->at("last_hidden_state"), inputs.at("attention_mask")),
      1e-5, 1e-6));
  // Without a mask every token counts.
  absl::StatusOr<NamedTensors> unmasked =
      (*model)->Forward({{"input_ids", inputs.at("input_ids")}});
  ASSERT_TRUE(unmasked.ok()) << unmasked.status();
  EXPECT_TRUE(at::allclose(unmasked->at(kSentenceEmbeddingOutput),
                           unmasked->at("last_hidden_state").mean(1), 1e-5,
                           1e-6));
}

TEST_F(SentenceEmbeddingModelTest, MalformedPipelinesNameTheFile) {
  AddPipeline("{\"not\": \"a list\"}");
  EXPECT_THAT(LoadError(), HasSubstr("modules.json: expected a JSON list"));

  AddPipeline(
      R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
                  {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                  {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])");
  EXPECT_THAT(LoadError(),
              HasSubstr("modules.json[2]: module type "
                        "'sentence_transformers.models.Dense' is not "
                        "supported"));

  AddPipeline(
      R"([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_THAT(LoadError(), HasSubstr("modules.json: castserve runs the "
                                     "pipeline Transformer, Pooling"));

  AddPipeline(
      R"([{"path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
                  {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_THAT(LoadError(), HasSubstr("modules.json[0]: the Transformer's "
                                     "path is '0_Transformer'"));

  AddPipeline(
      R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
                  {"path": "../../etc", "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_THAT(LoadError(),
              HasSubstr("modules.json[1]: path '../../etc' is not a folder "
                        "inside the model folder"));

  AddPipeline(R"([{"path": ""}])");
  EXPECT_THAT(LoadError(),
              HasSubstr("modules.json[0]: missing required key 'type'"));
}

TEST_F(SentenceEmbeddingModelTest, PoolingConfigMustFitTheModel) {
  AddPipeline(kModules, R"({"word_embedding_dimension": 384,
                            "pooling_mode_mean_tokens": true})");
  EXPECT_THAT(LoadError(),
              HasSubstr("modules.json: the Pooling module's "
                        "word_embedding_dimension is 384; the model's hidden "
                        "size is 32"));
  AddPipeline(kModules, R"({"word_embedding_dimension": 32})");
  EXPECT_THAT(LoadError(), HasSubstr("1_Pooling/config.json: switches on no "
                                     "pooling mode"));
}

TEST_F(SentenceEmbeddingModelTest, SentenceBertConfigIsChecked) {
  AddPipeline();
  Add("sentence_bert_config.json", R"({"do_lower_case": true})");
  EXPECT_THAT(LoadError(), HasSubstr("sentence_bert_config.json: "
                                     "do_lower_case true is not supported"));
  Add("sentence_bert_config.json", R"({"max_seq_length": 0})");
  EXPECT_THAT(LoadError(),
              HasSubstr("sentence_bert_config.json: max_seq_length is 0"));
}

// The layout sentence-transformers 6 writes: its module types, Pooling's
// pooling_mode, sentence_bert_config.json's task keys and no max_seq_length
// (the tokenizer's model_max_length truncates).
constexpr char kModules6[] = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"}
])";
constexpr char kSentenceBert6[] = R"({"transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward",
                                 "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings"})";

TEST_F(SentenceEmbeddingModelTest, ReadsSentenceTransformers6Layout) {
  AddPipeline(kModules6,
              R"({"embedding_dimension": 32, "pooling_mode": "mean",
                  "include_prompt": true})");
  Add("sentence_bert_config.json", kSentenceBert6);
  Add("tokenizer_config.json", R"({"model_max_length": 12})");
  absl::StatusOr<std::unique_ptr<Model>> model = Load();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->max_sequence_length(), 12);
  absl::StatusOr<NamedTensors> out = (*model)->Forward(TwoSentences());
  ASSERT_TRUE(out.ok()) << out.status();
  at::Tensor mean = MaskedMean(out->at("last_hidden_state"),
                               TwoSentences().at("attention_mask"));
  at::Tensor expected = mean / mean.norm(2, 1, true);
  EXPECT_TRUE(
      at::allclose(out->at("sentence_embedding"), expected, 1e-5, 1e-6));
  // The tokenizers' "unlimited" model_max_length leaves the position table.
  Add("tokenizer_config.json",
      R"({"model_max_length": 1000000000000000019884624838656})");
  model = Load();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->max_sequence_length(), 64);
}

TEST_F(SentenceEmbeddingModelTest, Sentence6TaskMustBeTokenEmbeddings) {
  AddPipeline(kModules6,
              R"({"embedding_dimension": 32, "pooling_mode": "cls"})");
  Add("sentence_bert_config.json",
      R"({"transformer_task": "sequence-classification"})");
  EXPECT_THAT(LoadError(),
              HasSubstr("transformer_task 'sequence-classification'"
                        " is not supported"));
  Add("sentence_bert_config.json",
      R"({"modality_config": {"image": {"method": "get_image_features",
          "method_output_name": "pooler_output"}}})");
  EXPECT_THAT(LoadError(), HasSubstr("modality_config 'image' runs "
                                     "get_image_features"));
}

}  // namespace
}  // namespace castserve::models
