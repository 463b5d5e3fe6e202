// The default repository's minilm end to end below gRPC: text in, the
// sentence-transformers embedding out, through HfServedModelFactory (the
// folder's tokenizer, the text input, the model and its sentence-transformers
// pipeline) and the wire request/response of BatchingServedModel::Infer.
// Compared with sentence-transformers' embeddings of 278 sentences
// (tools/gen_sentence_embeddings.py), in f32 and with the deploy config's fp8
// layerwise casting. Needs the real weights and tokenizer files
// (tools/fetch_minilm.sh; tools/test_all.sh runs it).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/loading/hf_config.h"
#include "models/test_util/tensor_files.h"
#include "server/lifecycle/model_config_loader.h"
#include "server/servables/factory/hf_served_model_factory.h"

namespace castserve {
namespace {

constexpr char kWeights[] = "models/testdata/minilm/weights";
constexpr char kSentences[] = "models/testdata/minilm/sentences.json";
constexpr char kEmbeddings[] =
    "models/testdata/minilm/sentence_embeddings.safetensors";
constexpr char kDeployConfig[] = "deploy/model_repository/minilm/config.pbtxt";
constexpr int kDimension = 384;

bool HasFetchedFiles() {
  for (const char* name : {"model.safetensors", "tokenizer.json",
                           "modules.json", "1_Pooling/config.json"}) {
    if (!std::ifstream(std::string(kWeights) + "/" + name).good()) return false;
  }
  return true;
}

std::vector<std::string> Sentences() {
  absl::StatusOr<std::vector<models::HfConfig>> rows =
      models::HfConfig::LoadList(kSentences);
  EXPECT_TRUE(rows.ok()) << rows.status();
  std::vector<std::string> texts;
  if (!rows.ok()) return texts;
  for (const models::HfConfig& row : *rows) {
    texts.push_back(row.GetString("text").value());
  }
  return texts;
}

// The deploy config (fp8 layerwise casting) serving the fetched folder.
inference::ModelConfig DeployConfig() {
  std::ifstream file(kDeployConfig);
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<inference::ModelConfig> config =
      ParseModelConfig(text.str(), "minilm");
  EXPECT_TRUE(config.ok()) << config.status();
  config->clear_checkpoint();  // The folder itself.
  return *config;
}

std::shared_ptr<ServedModel> Serve(const inference::ModelConfig& config) {
  FactoryOptions options;
  options.allow_symlinks_outside_repository = true;  // Runfiles are links.
  HfServedModelFactory factory(options);
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kWeights, config, nullptr);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// The wire request a Triton client sends: text [n, 1], BYTES raw contents
// (4-byte little-endian length, then the bytes), asking for
// sentence_embedding.
inference::ModelInferRequest TextRequest(
    const std::vector<std::string>& texts) {
  inference::ModelInferRequest request;
  request.set_model_name("minilm");
  auto* input = request.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(texts.size()));
  input->add_shape(1);
  std::string* raw = request.add_raw_input_contents();
  for (const std::string& text : texts) {
    const uint32_t length = static_cast<uint32_t>(text.size());
    raw->append(reinterpret_cast<const char*>(&length), 4);
    raw->append(text);
  }
  request.add_outputs()->set_name("sentence_embedding");
  return request;
}

// Runs `request` through Infer; the sentence_embedding rows it returns.
absl::StatusOr<at::Tensor> Embed(ServedModel& model,
                                 const inference::ModelInferRequest& request) {
  inference::ModelInferResponse response;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  std::promise<absl::Status> done;
  model.Infer(std::move(call),
              [&done](absl::Status status) { done.set_value(status); });
  absl::Status status = done.get_future().get();
  if (!status.ok()) return status;
  if (response.outputs_size() != 1 ||
      response.outputs(0).name() != "sentence_embedding" ||
      response.outputs(0).datatype() != "FP32") {
    return absl::InternalError(response.DebugString());
  }
  const std::string& raw = response.raw_output_contents(0);
  at::Tensor rows = at::empty(
      {static_cast<int64_t>(raw.size() / (4 * kDimension)), kDimension});
  std::memcpy(rows.data_ptr(), raw.data(), raw.size());
  return rows;
}

TEST(MiniLmTextEmbeddingTest, TextGivesTheSentenceTransformersEmbedding) {
  ASSERT_TRUE(HasFetchedFiles())
      << "the MiniLM weights or tokenizer files are missing: run "
         "tools/fetch_minilm.sh (tools/test_all.sh does)";
  const std::vector<std::string> texts = Sentences();
  auto reference = models::test_util::ReadSafetensors(kEmbeddings);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const at::Tensor expected = reference->at("sentence_embedding");
  ASSERT_EQ(expected.size(0), static_cast<int64_t>(texts.size()));
  ASSERT_GE(texts.size(), 200u);

  struct Case {
    const char* label;
    bool fp8;
    double min_cosine;
  };
  for (const Case& c :
       {Case{"f32", false, 0.9999}, Case{"deploy fp8 casting", true, 0.995}}) {
    inference::ModelConfig config = DeployConfig();
    if (!c.fp8) config.mutable_weights()->clear_casting();
    std::shared_ptr<ServedModel> model = Serve(config);
    ASSERT_NE(model, nullptr);
    const int64_t batch = model->config().max_batch_size();
    double worst = 1, sum = 0;
    size_t worst_index = 0;
    for (size_t start = 0; start < texts.size(); start += batch) {
      const size_t end = std::min(texts.size(), start + batch);
      const std::vector<std::string> chunk(texts.begin() + start,
                                           texts.begin() + end);
      absl::StatusOr<at::Tensor> rows = Embed(*model, TextRequest(chunk));
      ASSERT_TRUE(rows.ok()) << rows.status();
      ASSERT_EQ(rows->size(0), static_cast<int64_t>(chunk.size()));
      for (size_t i = start; i < end; ++i) {
        const double cosine = models::test_util::CosineSimilarity(
            (*rows)[i - start], expected[i]);
        sum += cosine;
        if (cosine < worst) {
          worst = cosine;
          worst_index = i;
        }
      }
    }
    std::printf(
        "minilm text -> sentence_embedding, %s: min cosine %.8f "
        "(sentence %zu), mean %.8f over %zu sentences\n",
        c.label, worst, worst_index, sum / texts.size(), texts.size());
    EXPECT_GE(worst, c.min_cosine) << c.label << ", sentence " << worst_index
                                   << ": " << texts[worst_index];
  }
}

TEST(MiniLmTextEmbeddingTest, SignatureShowsTextAndSentenceEmbedding) {
  ASSERT_TRUE(HasFetchedFiles()) << "run tools/fetch_minilm.sh";
  std::shared_ptr<ServedModel> model = Serve(DeployConfig());
  ASSERT_NE(model, nullptr);
  const TensorSpec& text = model->inputs().back();
  EXPECT_EQ(text.name, "text");
  EXPECT_EQ(text.datatype, "BYTES");
  EXPECT_EQ(text.shape, (std::vector<int64_t>{-1, 1}));
  EXPECT_TRUE(text.optional);
  const TensorSpec& embedding = model->outputs().back();
  EXPECT_EQ(embedding.name, "sentence_embedding");
  EXPECT_EQ(embedding.datatype, "FP32");
  EXPECT_EQ(embedding.shape, (std::vector<int64_t>{-1, kDimension}));
  const inference::ModelInput& configured =
      model->config().input(model->config().input_size() - 1);
  EXPECT_EQ(configured.name(), "text");
  EXPECT_EQ(configured.data_type(), inference::TYPE_STRING);
  EXPECT_TRUE(configured.optional());
  // Text longer than max_seq_length (256) is truncated, not refused.
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "word ";
  absl::StatusOr<at::Tensor> rows = Embed(*model, TextRequest({long_text}));
  EXPECT_TRUE(rows.ok()) << rows.status();
}

}  // namespace
}  // namespace castserve
