#include "models/loading/model_loader.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"
#include "casting/memory/tracking_allocator.h"
#include "models/kernels/storage_product.h"
#include "models/test_util/tensor_files.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve::models {
namespace {

using casting::ComputeCopyPolicy;
using casting::ElementType;
using casting::Residency;

constexpr char kBert[] = "models/testdata/bert";

// A BERT large enough that weights dominate activations: the biggest
// module's weight is 1 MiB of f32 (intermediate/output dense, word
// embeddings), a whole forward at batch 1 x 8 tokens needs far less.
constexpr int64_t kHidden = 256, kInter = 1024, kLayers = 6, kVocab = 1024,
                  kPositions = 64;
constexpr int64_t kBiggestModuleBytes = kInter * kHidden * 4 + kInter * 4;

std::vector<casting::test_util::HeaderTensor> BertTensors() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"embeddings.word_embeddings.weight", {kVocab, kHidden}},
      {"embeddings.position_embeddings.weight", {kPositions, kHidden}},
      {"embeddings.token_type_embeddings.weight", {2, kHidden}},
      {"embeddings.LayerNorm.weight", {kHidden}},
      {"embeddings.LayerNorm.bias", {kHidden}},
      {"pooler.dense.weight", {kHidden, kHidden}},
      {"pooler.dense.bias", {kHidden}}};
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = absl::StrCat("encoder.layer.", i, ".");
    for (const char* name :
         {"attention.self.query", "attention.self.key", "attention.self.value",
          "attention.output.dense"}) {
      shapes.push_back({p + name + ".weight", {kHidden, kHidden}});
      shapes.push_back({p + name + ".bias", {kHidden}});
    }
    shapes.push_back({p + "intermediate.dense.weight", {kInter, kHidden}});
    shapes.push_back({p + "intermediate.dense.bias", {kInter}});
    shapes.push_back({p + "output.dense.weight", {kHidden, kInter}});
    shapes.push_back({p + "output.dense.bias", {kHidden}});
    for (const char* norm :
         {"attention.output.LayerNorm", "output.LayerNorm"}) {
      shapes.push_back({p + norm + ".weight", {kHidden}});
      shapes.push_back({p + norm + ".bias", {kHidden}});
    }
  }
  std::vector<casting::test_util::HeaderTensor> tensors;
  uint64_t offset = 0;
  for (auto& [name, shape] : shapes) {
    uint64_t bytes = 4;
    for (int64_t dim : shape) bytes *= dim;
    tensors.push_back({name, "F32", shape, offset, offset + bytes});
    offset += bytes;
  }
  return tensors;
}

// Writes config.json and a sparse (all-zero, nothing cached) checkpoint.
std::string WriteSparseBert() {
  const std::string folder = test_util::MakeScratchDir("sparse_bert");
  std::ofstream(folder + "/config.json")
      << absl::StrCat(R"({"model_type": "bert", "hidden_size": )", kHidden,
                      R"(, "num_hidden_layers": )", kLayers,
                      R"(, "num_attention_heads": 4, "intermediate_size": )",
                      kInter, R"(, "vocab_size": )", kVocab,
                      R"(, "max_position_embeddings": )", kPositions, "}");
  const auto tensors = BertTensors();
  const std::string header = casting::test_util::MakeHeaderJson(tensors);
  const std::string path = folder + "/model.safetensors";
  EXPECT_TRUE(casting::test_util::WriteSafetensorsFile(
                  path, header, "", 8 + header.size() + tensors.back().end)
                  .ok());
  const int fd = open(path.c_str(), O_RDONLY);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  return folder;
}

// Bytes of the checkpoint's data pages in the page cache, past the first
// page after the header.
uint64_t ResidentDataBytes(const std::string& folder) {
  auto checkpoint = casting::OpenSafetensors(folder + "/model.safetensors");
  EXPECT_TRUE(checkpoint.ok());
  const platform::MappedFile& file = (*checkpoint)->file(0);
  uint64_t data_start = UINT64_MAX;
  for (const auto& entry : (*checkpoint)->tensors()) {
    data_start = std::min(data_start, entry.offset_bytes);
  }
  const uint64_t skip = data_start + 4096 - data_start % 4096;
  return *file.ResidentBytes(skip, file.size_bytes() - skip);
}

NamedTensors SmallInputs() {
  return {{"input_ids", at::arange(8, at::kLong).view({1, 8})}};
}

class ModelLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  }
};

TEST_F(ModelLoaderTest, RegistryRejectsDuplicatesAndEmptyNames) {
  auto factory =
      [](const HfConfig&, std::shared_ptr<const casting::Checkpoint>,
         const WeightPolicyOptions&) -> absl::StatusOr<std::unique_ptr<Model>> {
    return absl::UnimplementedError("test architecture");
  };
  EXPECT_TRUE(RegisterArchitecture("test_arch", factory).ok());
  EXPECT_EQ(RegisterArchitecture("test_arch", factory).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RegisterArchitecture("bert", factory).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RegisterArchitecture("", factory).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> names = RegisteredArchitectures();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "bert"), names.end());
  // The override picks the registered factory, whose error comes back.
  EXPECT_EQ(LoadHfModel(kBert, {}, "test_arch").status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(ModelLoaderTest, UnknownArchitectureListsSupportedOnes) {
  absl::Status status = LoadHfModel(kBert, {}, "gpt_neox").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("gpt_neox"), std::string::npos);
  EXPECT_NE(status.message().find("bert"), std::string::npos);
}

TEST_F(ModelLoaderTest, OverrideReplacesModelType) {
  const std::string folder = test_util::MakeScratchDir("override");
  std::ofstream(folder + "/config.json") << absl::StrCat(
      R"({"model_type": "my_bert", "hidden_size": 8, "num_hidden_layers": 1,)",
      R"( "num_attention_heads": 2, "intermediate_size": 16,)",
      R"( "vocab_size": 16, "max_position_embeddings": 4})");
  std::map<std::string, at::Tensor> weights;
  for (const auto& tensor : BertTensors()) {
    if (tensor.name.find("encoder.layer.") == 0 &&
        tensor.name.find("encoder.layer.0.") != 0) {
      continue;
    }
    // kVocab is kInter: the word embeddings shrink to 16 rows too.
    std::vector<int64_t> shape = tensor.shape;
    for (int64_t& dim : shape) {
      dim = dim == kHidden      ? 8
            : dim == kInter     ? 16
            : dim == kPositions ? 4
                                : dim;
    }
    weights[tensor.name] = at::randn(shape);
  }
  ASSERT_TRUE(
      test_util::WriteSafetensors(folder + "/model.safetensors", weights).ok());
  EXPECT_EQ(LoadHfModel(folder, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto model = LoadHfModel(folder, {}, "bert");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "bert");
  auto outputs =
      (*model)->Forward({{"input_ids", at::ones({2, 3}, at::kLong)}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->at("last_hidden_state").sizes(),
            at::IntArrayRef({2, 3, 8}));
}

TEST_F(ModelLoaderTest, MissingFilesAreNotFound) {
  const std::string empty = test_util::MakeScratchDir("empty");
  EXPECT_EQ(LoadHfModel(empty, {}).status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(empty + "/config.json") << R"({"model_type": "bert"})";
  absl::Status status = LoadHfModel(empty, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("pytorch_model.bin"), std::string::npos);
}

// Every file of a load (config.json, the checkpoint) goes through the
// FileSystem given: a folder that exists only as the fake's symlink loads.
TEST_F(ModelLoaderTest, LoadsThroughTheFileSystem) {
  absl::StatusOr<std::string> real =
      platform::FileSystem::Default()->RealPath(kBert);
  ASSERT_TRUE(real.ok()) << real.status();
  platform::FakeFileSystem file_system(platform::FileSystem::Default());
  file_system.AddSymlink("/virtual/bert", *real);
  auto model = LoadHfModel("/virtual/bert", {}, "", &file_system);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->architecture(), "bert");
  EXPECT_EQ(LoadHfModel("/virtual/bert", {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ModelLoaderTest, OpensShardedIndexAndTorchZip) {
  auto sharded = OpenHfCheckpoint("models/testdata/llama");
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ((*sharded)->file_count(), 2);
  auto zip = OpenHfCheckpoint("models/testdata/bert_bin");
  ASSERT_TRUE(zip.ok()) << zip.status();
  EXPECT_NE((*zip)->Find("embeddings.word_embeddings.weight"), nullptr);
}

TEST_F(ModelLoaderTest, BuildingReadsHeadersOnly) {
  const std::string folder = WriteSparseBert();
  ASSERT_EQ(ResidentDataBytes(folder), 0u);
  WeightPolicyOptions options;
  options.residency = Residency::kMapped;
  auto model = LoadHfModel(folder, options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(ResidentDataBytes(folder), 0u);
  // The check can fail: a forward faults the weights in.
  ASSERT_TRUE((*model)->Forward(SmallInputs()).ok());
  EXPECT_GT(ResidentDataBytes(folder), uint64_t{kBiggestModuleBytes});
}

TEST_F(ModelLoaderTest, LayerwiseCastingBuildReadsHeadersOnly) {
  const std::string folder = WriteSparseBert();
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create({});
  options.compute_copy = ComputeCopyPolicy::kTransient;
  auto model = LoadHfModel(folder, options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(ResidentDataBytes(folder), 0u);
  options.eager = true;  // Eager loading reads everything at build.
  ASSERT_TRUE(LoadHfModel(folder, options).ok());
  EXPECT_GT(ResidentDataBytes(folder), uint64_t{kBiggestModuleBytes});
}

TEST_F(ModelLoaderTest, TruncatedCheckpointIsDataLossNotACrash) {
  const std::string folder = test_util::MakeScratchDir("truncated");
  for (const char* name : {"config.json", "model.safetensors"}) {
    std::ifstream in(std::string(kBert) + "/" + name, std::ios::binary);
    std::ofstream(folder + "/" + name, std::ios::binary) << in.rdbuf();
  }
  WeightPolicyOptions options;
  options.residency = Residency::kMapped;
  auto model = LoadHfModel(folder, options);
  ASSERT_TRUE(model.ok());
  ASSERT_EQ(truncate((folder + "/model.safetensors").c_str(), 0), 0);
  EXPECT_EQ((*model)->Forward(SmallInputs()).status().code(),
            absl::StatusCode::kDataLoss);
}

// Memory behaviour through the tracking allocator.

// Adds to every module with weights a pre-hook (after the casting hooks)
// recording ForwardContext::modules_holding().
void ProbeHolding(Model& model, std::vector<int>* holding) {
  model.root().Visit([holding](Module& module) {
    if (module.weights().empty()) return;
    module.AddPreForwardHook([holding](const Module&, ForwardContext& context) {
      holding->push_back(context.modules_holding());
    });
  });
}

// Peak increase of tracked CPU bytes during one forward.
int64_t ForwardPeakIncrease(const Model& model) {
  NamedTensors inputs = SmallInputs();
  casting::PeakScope scope;
  EXPECT_TRUE(model.Forward(inputs).ok());
  scope.Stop();
  return scope.peak_increase_bytes();
}

WeightPolicyOptions Fp8Transient(bool prefetch) {
  casting::CastingPolicy::Options policy;
  policy.storage_dtype = ElementType::kF8E4M3FN;
  policy.scaling = casting::Scaling::kPerRow;
  policy.compute_dtype = ElementType::kF32;
  WeightPolicyOptions options;
  options.casting = *casting::CastingPolicy::Create(policy);
  options.compute_copy = ComputeCopyPolicy::kTransient;
  options.prefetch = prefetch;
  return options;
}

TEST_F(ModelLoaderTest, TransientCastingHoldsOneModuleAtATime) {
  auto model = LoadHfModel(WriteSparseBert(), Fp8Transient(false));
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int> holding;
  ProbeHolding(**model, &holding);
  // The small inputs' products would read the fp8 storage without any
  // compute copy (models/kernels/storage_product.h): force the compute-copy
  // path this test is about.
  SetStorageProductMaxRows(0);
  ForwardPeakIncrease(**model);  // Makes the resident fp8 copies.
  const int64_t peak = ForwardPeakIncrease(**model);
  EXPECT_GE(peak, kBiggestModuleBytes);
  EXPECT_LT(peak, kBiggestModuleBytes + kBiggestModuleBytes / 2);
  ASSERT_FALSE(holding.empty());
  EXPECT_EQ(*std::max_element(holding.begin(), holding.end()), 1);
  // Reading storage instead, the forward holds no module's compute copy.
  SetStorageProductMaxRows(kDefaultStorageProductMaxRows);
  EXPECT_LT(ForwardPeakIncrease(**model), kBiggestModuleBytes);
}

TEST_F(ModelLoaderTest, PooledTransientCopiesAllocateNothingAfterTheFirst) {
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  for (bool prefetch : {false, true}) {
    WeightPolicyOptions options = Fp8Transient(prefetch);
    options.reuse_transient_buffers = true;
    auto model = LoadHfModel(WriteSparseBert(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    // Resident copies; fills the pool. With prefetch, how many copies of a
    // shape are alive at once (the running module's and the next one's)
    // depends on timing, so the pool may take a few forwards to hold as many
    // of a shape as are ever alive together: warm up with four.
    for (int i = 0; i < 4; ++i) ForwardPeakIncrease(**model);
    const int64_t after_warmup = allocator->AllocatedBytes();
    // Each copy comes from a freed one of the same shape: the forwards only
    // allocate activations.
    for (int i = 0; i < 3; ++i) {
      EXPECT_LT(ForwardPeakIncrease(**model), kBiggestModuleBytes / 2)
          << "prefetch=" << prefetch;
    }
    EXPECT_EQ(allocator->AllocatedBytes(), after_warmup)
        << "prefetch=" << prefetch;
  }
}

TEST_F(ModelLoaderTest, PrefetchHoldsAtMostTwoModules) {
  auto model = LoadHfModel(WriteSparseBert(), Fp8Transient(true));
  ASSERT_TRUE(model.ok()) << model.status();
  ForwardPeakIncrease(**model);  // Resident copies; learns the order.
  const int64_t peak = ForwardPeakIncrease(**model);
  EXPECT_LT(peak, 2 * kBiggestModuleBytes + kBiggestModuleBytes / 2);
}

TEST_F(ModelLoaderTest, CachedPolicySecondForwardAllocatesNoWeights) {
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  WeightPolicyOptions options;
  options.residency = Residency::kMapped;
  options.compute_copy = ComputeCopyPolicy::kCached;
  auto model = LoadHfModel(WriteSparseBert(), options);
  ASSERT_TRUE(model.ok());
  const int64_t first_peak = ForwardPeakIncrease(**model);
  const int64_t after_first = allocator->AllocatedBytes();
  const int64_t second_peak = ForwardPeakIncrease(**model);
  EXPECT_EQ(allocator->AllocatedBytes(), after_first);
  EXPECT_GT(first_peak, kLayers * kBiggestModuleBytes);
  EXPECT_LT(second_peak, kBiggestModuleBytes / 2);
}

TEST_F(ModelLoaderTest, UnloadingReturnsTrackedBytes) {
  casting::TrackingAllocator* allocator =
      casting::TrackingAllocator::Installed();
  const std::string folder = WriteSparseBert();
  for (const WeightPolicyOptions& options :
       {Fp8Transient(false), Fp8Transient(true), WeightPolicyOptions{}}) {
    const int64_t before = allocator->AllocatedBytes();
    {
      auto model = LoadHfModel(folder, options);
      ASSERT_TRUE(model.ok());
      ForwardPeakIncrease(**model);
      ForwardPeakIncrease(**model);
      EXPECT_GT(allocator->AllocatedBytes(), before);
    }
    EXPECT_EQ(allocator->AllocatedBytes(), before);
  }
}

}  // namespace
}  // namespace castserve::models
