// The encoder fixtures of tools/gen_encoder_fixtures.py end to end below
// gRPC, through HfServedModelFactory and the wire request/response of
// ServedModel::Infer: a cross-encoder (XLM-RoBERTa, BERT) takes BYTES
// `query` and `document` and answers FP32 `scores` equal to transformers'
// logits and CrossEncoder.predict, its labels in the config's parameters
// (also through a Unigram tokenizer.json, text/testdata/unigram);
// the XLM-RoBERTa sentence-transformers folder takes `text` and answers
// sentence-transformers' embedding, and so does an XLM-RoBERTa folder whose
// tokenizer.json is SentencePiece's Unigram (text/testdata/unigram). Also
// the requests it refuses.
#include <ATen/ATen.h>

#include <cstring>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "casting/formats/safetensors_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/test_util/tensor_files.h"
#include "platform/json_parser.h"
#include "server/servables/factory/hf_served_model_factory.h"

namespace castserve {
namespace {

using ::testing::HasSubstr;
using Tensors = std::map<std::string, at::Tensor>;

Tensors Reference(const std::string& folder) {
  auto tensors =
      models::test_util::ReadSafetensors(folder + "/reference.safetensors");
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *tensors : Tensors{};
}

// The texts of the reference's metadata entry `key` (a JSON list).
std::vector<std::string> MetadataTexts(const std::string& folder,
                                       const std::string& key) {
  auto checkpoint = casting::OpenSafetensors(folder + "/reference.safetensors");
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return {};
  auto list = platform::ParseJson((*checkpoint)->metadata().at(key));
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? list->get<std::vector<std::string>>()
                   : std::vector<std::string>{};
}

std::shared_ptr<ServedModel> Serve(const std::string& folder,
                                   const std::string& casting = "") {
  inference::ModelConfig config;
  config.set_name("encoder");
  config.set_max_batch_size(8);
  if (!casting.empty()) {
    auto* weights = config.mutable_weights();
    weights->set_compute_copy(inference::COMPUTE_COPY_TRANSIENT);
    weights->mutable_casting()->set_storage_dtype(
        inference::STORAGE_DTYPE_F8_E4M3FN);
    weights->mutable_casting()->set_scaling(inference::SCALING_PER_ROW);
    weights->mutable_casting()->set_compute_dtype(inference::COMPUTE_DTYPE_F32);
  }
  FactoryOptions options;
  options.allow_symlinks_outside_repository = true;  // Runfiles are links.
  HfServedModelFactory factory(options);
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(folder, config, nullptr);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// Adds BYTES input `name` [n, 1] with `texts` as raw contents (4-byte
// little-endian length, then the bytes), as a Triton client sends it.
void AddStrings(inference::ModelInferRequest& request, const std::string& name,
                const std::vector<std::string>& texts) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(texts.size()));
  input->add_shape(1);
  std::string* raw = request.add_raw_input_contents();
  for (const std::string& text : texts) {
    const uint32_t length = static_cast<uint32_t>(text.size());
    raw->append(reinterpret_cast<const char*>(&length), 4);
    raw->append(text);
  }
}

// Runs `request` through Infer; output `name` as [rows, columns] f32.
absl::StatusOr<at::Tensor> Infer(ServedModel& model,
                                 const inference::ModelInferRequest& request,
                                 const std::string& name, int64_t columns) {
  inference::ModelInferResponse response;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  std::promise<absl::Status> done;
  model.Infer(std::move(call),
              [&done](absl::Status status) { done.set_value(status); });
  absl::Status status = done.get_future().get();
  if (!status.ok()) return status;
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() != name) continue;
    if (response.outputs(i).datatype() != "FP32") break;
    const std::string& raw = response.raw_output_contents(i);
    at::Tensor rows =
        at::empty({static_cast<int64_t>(raw.size() / (4 * columns)), columns});
    std::memcpy(rows.data_ptr(), raw.data(), raw.size());
    return rows;
  }
  return absl::InternalError(response.DebugString());
}

inference::ModelInferRequest PairRequest(
    const std::vector<std::string>& queries,
    const std::vector<std::string>& documents) {
  inference::ModelInferRequest request;
  request.set_model_name("encoder");
  AddStrings(request, "query", queries);
  AddStrings(request, "document", documents);
  request.add_outputs()->set_name("scores");
  return request;
}

struct RerankerCase {
  const char* folder;
  const char* labels_json;
};

class RerankerServingTest : public ::testing::TestWithParam<RerankerCase> {};

TEST_P(RerankerServingTest, QueryAndDocumentGiveTheReferenceScores) {
  const std::string folder = GetParam().folder;
  const Tensors reference = Reference(folder);
  const at::Tensor& expected = reference.at("output.scores");
  const std::vector<std::string> queries = MetadataTexts(folder, "queries");
  const std::vector<std::string> documents = MetadataTexts(folder, "documents");
  ASSERT_EQ(queries.size(), 4u);
  for (const std::string casting : {"", "fp8"}) {
    std::shared_ptr<ServedModel> model = Serve(folder, casting);
    ASSERT_NE(model, nullptr);
    absl::StatusOr<at::Tensor> scores = Infer(
        *model, PairRequest(queries, documents), "scores", expected.size(1));
    ASSERT_TRUE(scores.ok()) << scores.status();
    const at::Tensor& want =
        casting.empty()
            ? expected
            : reference.at("roundtrip.F8_E4M3FN:per_row.output.scores");
    EXPECT_LE(models::test_util::RelativeMaxError(*scores, want), 1e-4)
        << casting;
    if (casting.empty()) {
      EXPECT_LE(models::test_util::RelativeMaxError(
                    *scores, reference.at("output.cross_encoder")),
                1e-4);
    }
  }
}

TEST_P(RerankerServingTest, ConfigNamesTheInputsAndTheLabels) {
  std::shared_ptr<ServedModel> model = Serve(GetParam().folder);
  ASSERT_NE(model, nullptr);
  const inference::ModelConfig& config = model->config();
  std::vector<std::string> inputs;
  for (const auto& input : config.input()) inputs.push_back(input.name());
  EXPECT_THAT(inputs, ::testing::IsSupersetOf({"query", "document", "text"}));
  ASSERT_EQ(config.output_size(), 1);
  EXPECT_EQ(config.output(0).name(), "scores");
  EXPECT_EQ(config.output(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(config.parameters().at("castserve_score_labels").string_value(),
            GetParam().labels_json);
}

TEST_P(RerankerServingTest, RefusesMalformedPairRequests) {
  std::shared_ptr<ServedModel> model = Serve(GetParam().folder);
  ASSERT_NE(model, nullptr);
  inference::ModelInferRequest uneven = PairRequest({"a", "b"}, {"c"});
  EXPECT_THAT(
      std::string(Infer(*model, uneven, "scores", 1).status().message()),
      HasSubstr("one query per document"));
  inference::ModelInferRequest alone;
  alone.set_model_name("encoder");
  AddStrings(alone, "query", {"a"});
  EXPECT_THAT(std::string(Infer(*model, alone, "scores", 1).status().message()),
              HasSubstr("exactly the inputs 'query' and 'document'"));
}

INSTANTIATE_TEST_SUITE_P(
    Rerankers, RerankerServingTest,
    ::testing::Values(
        RerankerCase{"models/testdata/xlm_roberta_reranker", R"(["LABEL_0"])"},
        // bge-reranker's kind of tokenizer: Unigram with SentencePiece's
        // Precompiled normalizer, the pair template "<s> A </s></s> B </s>".
        RerankerCase{"text/testdata/unigram/xlm_roberta_reranker",
                     R"(["LABEL_0"])"},
        RerankerCase{"models/testdata/bert_reranker",
                     R"(["contradiction","entailment","neutral"])"}));

TEST(XlmRobertaServingTest, TextGivesTheSentenceTransformersEmbedding) {
  const std::string folder = "models/testdata/xlm_roberta";
  const Tensors reference = Reference(folder);
  std::shared_ptr<ServedModel> model = Serve(folder);
  ASSERT_NE(model, nullptr);
  inference::ModelInferRequest request;
  request.set_model_name("encoder");
  AddStrings(request, "text", MetadataTexts(folder, "texts"));
  request.add_outputs()->set_name("sentence_embedding");
  absl::StatusOr<at::Tensor> embedding =
      Infer(*model, request, "sentence_embedding", 32);
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  const at::Tensor& expected = reference.at("output.sentence_embedding");
  EXPECT_LE(models::test_util::RelativeMaxError(*embedding, expected), 1e-4);
  EXPECT_GE(at::cosine_similarity(*embedding, expected, 1).min().item<double>(),
            0.9999);
  // Not a cross-encoder: a pair request is refused, saying why.
  inference::ModelInferRequest pair = PairRequest({"a"}, {"b"});
  pair.clear_outputs();
  EXPECT_THAT(std::string(Infer(*model, pair, "scores", 1).status().message()),
              HasSubstr("are for a cross-encoder"));
}

// The rotary encoders' sentence-transformers folders, text in: ModernBERT
// (classic pipeline, cls pooling, no token types) and NomicBERT (the
// layout sentence-transformers 6 saves, mean pooling), also with fp8
// layerwise casting (the embedding within the cast's own error).
class RotarySentenceServingTest : public ::testing::TestWithParam<const char*> {
};

TEST_P(RotarySentenceServingTest, TextGivesTheSentenceTransformersEmbedding) {
  const std::string folder = GetParam();
  const Tensors reference = Reference(folder);
  const at::Tensor& expected = reference.at("output.sentence_embedding");
  for (const char* casting : {"", "fp8"}) {
    std::shared_ptr<ServedModel> model = Serve(folder, casting);
    ASSERT_NE(model, nullptr) << casting;
    inference::ModelInferRequest request;
    request.set_model_name("encoder");
    AddStrings(request, "text", MetadataTexts(folder, "texts"));
    request.add_outputs()->set_name("sentence_embedding");
    absl::StatusOr<at::Tensor> embedding =
        Infer(*model, request, "sentence_embedding", 32);
    ASSERT_TRUE(embedding.ok()) << embedding.status();
    const double cosine =
        at::cosine_similarity(*embedding, expected, 1).min().item<double>();
    if (std::string(casting).empty()) {
      EXPECT_LE(models::test_util::RelativeMaxError(*embedding, expected),
                1e-4);
      EXPECT_GE(cosine, 0.9999);
    } else {
      EXPECT_GE(cosine, 0.99) << "fp8";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, RotarySentenceServingTest,
                         ::testing::Values("models/testdata/modernbert",
                                           "models/testdata/nomic_bert"));

// Adds INT64 input `name` with the contents of `values` (2-D).
void AddInt64(inference::ModelInferRequest& request, const std::string& name,
              const at::Tensor& values) {
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype("INT64");
  for (int64_t size : values.sizes()) input->add_shape(size);
  const at::Tensor contiguous = values.to(at::kLong).contiguous();
  request.add_raw_input_contents()->assign(
      static_cast<const char*>(contiguous.data_ptr()),
      contiguous.numel() * sizeof(int64_t));
}

// XLM-RoBERTa as bge-m3 / multilingual-e5 ship it: a Unigram tokenizer.json
// with SentencePiece's Precompiled normalizer. Text gives sentence-
// transformers' embedding, and the same as the tokenizer's ids sent as
// tensors.
TEST(XlmRobertaServingTest, UnigramTokenizerTextEqualsTheTokenIdPath) {
  const std::string folder = "text/testdata/unigram/xlm_roberta_model";
  const Tensors reference = Reference(folder);
  const at::Tensor& expected = reference.at("output.sentence_embedding");
  std::shared_ptr<ServedModel> model = Serve(folder);
  ASSERT_NE(model, nullptr);
  inference::ModelInferRequest text;
  text.set_model_name("encoder");
  AddStrings(text, "text", MetadataTexts(folder, "texts"));
  text.add_outputs()->set_name("sentence_embedding");
  absl::StatusOr<at::Tensor> from_text =
      Infer(*model, text, "sentence_embedding", 32);
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  EXPECT_LE(models::test_util::RelativeMaxError(*from_text, expected), 1e-4);
  inference::ModelInferRequest ids;
  ids.set_model_name("encoder");
  AddInt64(ids, "input_ids", reference.at("input.input_ids"));
  AddInt64(ids, "attention_mask", reference.at("input.attention_mask"));
  ids.add_outputs()->set_name("sentence_embedding");
  absl::StatusOr<at::Tensor> from_ids =
      Infer(*model, ids, "sentence_embedding", 32);
  ASSERT_TRUE(from_ids.ok()) << from_ids.status();
  EXPECT_LE(models::test_util::RelativeMaxError(*from_ids, expected), 1e-4);
  EXPECT_LE(models::test_util::RelativeMaxError(*from_text, *from_ids), 1e-5);
}

}  // namespace
}  // namespace castserve
