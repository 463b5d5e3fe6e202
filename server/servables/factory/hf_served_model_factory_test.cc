#include "server/servables/factory/hf_served_model_factory.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "casting/casting_policy.h"
#include "casting/device/device_probe.h"
#include "casting/memory/tracking_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/test_util/tensor_files.h"
#include "server/servables/batching/batching_served_model.h"
#include "server/servables/text_input.h"
#include "server/test_util/fake_tokenizer.h"

namespace castserve {
namespace {

// Bazel's runfiles are symlinks into the source tree: the fixture's files
// lead outside their "repository" (RepositoryBoundary).
FactoryOptions RunfilesOptions() {
  FactoryOptions options;
  options.allow_symlinks_outside_repository = true;
  return options;
}

namespace fs = std::filesystem;

// Runfiles-relative: a Hugging Face BertModel folder with reference outputs.
constexpr char kBertDirectory[] = "models/testdata/bert";
constexpr int kHiddenSize = 32;

std::map<std::string, at::Tensor> Reference() {
  auto tensors = models::test_util::ReadSafetensors(
      std::string(kBertDirectory) + "/reference.safetensors");
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *tensors : std::map<std::string, at::Tensor>{};
}

models::NamedTensors ReferenceRequest(
    const std::map<std::string, at::Tensor>& reference) {
  models::NamedTensors inputs;
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    inputs[name] = reference.at(std::string("input.") + name);
  }
  return inputs;
}

inference::ModelConfig BertConfig() {
  inference::ModelConfig config;
  config.set_name("bert");
  config.set_max_batch_size(4);
  config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(1000);
  return config;
}

// Runs `inputs` through the factory's served model below the wire (its
// tensor-level Enqueue), checked by its model as the request edge would.
InferenceResult InferNow(ServedModel& model, models::NamedTensors inputs) {
  auto& served = dynamic_cast<BatchingServedModel&>(model);
  const int64_t batch_size = inputs.at("input_ids").size(0);
  InferenceRequest request(
      served.model().CheckInputs(std::move(inputs)).value());
  request.batch_size = batch_size;
  std::promise<InferenceResult> promise;
  std::future<InferenceResult> future = promise.get_future();
  served.Enqueue(std::move(request), [&promise](InferenceResult result) {
    promise.set_value(std::move(result));
  });
  return future.get();
}

TEST(HfServedModelFactoryTest, ServesTheBertFixtureWithReferenceOutputs) {
  HfServedModelFactory factory(RunfilesOptions());
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, BertConfig(), nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto reference = Reference();
  InferenceResult result = InferNow(**model, ReferenceRequest(reference));
  ASSERT_TRUE(result.outputs.ok()) << result.outputs.status();
  for (const char* name : {"last_hidden_state", "pooler_output"}) {
    EXPECT_LT(models::test_util::RelativeMaxError(
                  result.outputs->at(name),
                  reference.at(std::string("output.") + name)),
              1e-4)
        << name;
  }
}

TEST(HfServedModelFactoryTest,
     ProjectionIsWhatTheServedModelHoldsBeforeAnyRead) {
  HfServedModelFactory factory(RunfilesOptions());
  inference::ModelConfig config = BertConfig();
  // Eager: the projection must not read what the load reads.
  config.mutable_weights()->set_materialization(
      inference::MATERIALIZATION_EAGER);
  absl::StatusOr<int64_t> projected =
      factory.ProjectedBytes(kBertDirectory, config);
  ASSERT_TRUE(projected.ok()) << projected.status();
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, config, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t weight_bytes = (*model)->footprint().owned_bytes();
  EXPECT_GT(weight_bytes, 100000) << "the fixture's f32 weights, resident";
  // Beyond the weights: the packed encoder layers' second copy of their
  // products' weights (f32 cached on the CPU; here about 60 % of all the
  // weights, the rest being embeddings) and the buffers the build made (a
  // few KiB).
  EXPECT_GT(*projected, weight_bytes + weight_bytes / 2)
      << "the packed layers' copies are counted";
  EXPECT_LT(*projected, 2 * weight_bytes + weight_bytes / 10);
  InferNow(**model, ReferenceRequest(Reference()));
  EXPECT_LE((*model)->footprint().owned_bytes(), *projected);

  // Two instances: the transient copies two forwards hold at once.
  inference::ModelConfig casting = BertConfig();
  casting.mutable_weights()->set_compute_copy(
      inference::COMPUTE_COPY_TRANSIENT);
  casting.mutable_weights()->mutable_casting()->set_storage_dtype(
      inference::STORAGE_DTYPE_BF16);
  const int64_t one = *factory.ProjectedBytes(kBertDirectory, casting);
  auto* group = casting.add_instance_group();
  group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  group->set_count(2);
  const int64_t two = *factory.ProjectedBytes(kBertDirectory, casting);
  EXPECT_GT(two, one);
  EXPECT_LT(one, *projected) << "bf16 storage is smaller than f32";

  // A config Create refuses, the projection refuses alike.
  EXPECT_EQ(
      factory.ProjectedBytes("/no/such/model", BertConfig()).status().code(),
      factory.Create("/no/such/model", BertConfig(), nullptr).status().code());
}

TEST(HfServedModelFactoryTest,
     TierProjectionBoundsEachTierAndMovesKeepOutputs) {
  HfServedModelFactory factory(RunfilesOptions());
  // Resident bf16 storage with cached f32 compute copies: every tier frees
  // something.
  inference::ModelConfig config = BertConfig();
  config.mutable_weights()->set_compute_copy(inference::COMPUTE_COPY_CACHED);
  config.mutable_weights()->mutable_casting()->set_storage_dtype(
      inference::STORAGE_DTYPE_BF16);
  absl::StatusOr<TierBytes> tiers =
      factory.ProjectedTierBytes(kBertDirectory, config);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  EXPECT_EQ(tiers->hot, *factory.ProjectedBytes(kBertDirectory, config));
  EXPECT_GT(tiers->hot, tiers->warm);
  EXPECT_GT(tiers->warm, tiers->cool);

  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, config, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const InferenceResult hot = InferNow(**model, ReferenceRequest(Reference()));
  ASSERT_TRUE(hot.outputs.ok()) << hot.outputs.status();
  EXPECT_LE((*model)->footprint().owned_bytes(), tiers->hot);
  EXPECT_GT((*model)->footprint().owned_bytes(), tiers->warm);

  for (const casting::WeightTier tier :
       {casting::WeightTier::kWarm, casting::WeightTier::kCool}) {
    ASSERT_TRUE((*model)->MoveTo(tier).ok());
    EXPECT_EQ((*model)->tier(), tier);
    EXPECT_LE((*model)->footprint().owned_bytes(), tiers->at(tier))
        << casting::WeightTierName(tier);
    ASSERT_TRUE((*model)->MoveTo(casting::WeightTier::kHot).ok());
    const InferenceResult again =
        InferNow(**model, ReferenceRequest(Reference()));
    ASSERT_TRUE(again.outputs.ok()) << again.outputs.status();
    for (const auto& [name, tensor] : *hot.outputs) {
      EXPECT_TRUE(at::equal(tensor, again.outputs->at(name)))
          << name << " after " << casting::WeightTierName(tier);
    }
  }
  // The last promotion (from cool) is not cancelled by a next move: the
  // servable reports its timing once it ends (the ModelManager's wake rates).
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while ((*model)->last_promotion().count == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const ServedModel::PromotionTiming woke = (*model)->last_promotion();
  EXPECT_GE(woke.count, 1);
  EXPECT_EQ(woke.to, casting::WeightTier::kHot);
  EXPECT_GT(woke.took, absl::ZeroDuration());
  // Credited with what it built itself: at most the tiers' difference
  // (the request's forward may have built some of it first).
  EXPECT_LE(woke.bytes, tiers->hot - tiers->at(woke.from));

  // f32 resident, no casting: the storage is the compute copy; warm frees
  // only the packed encoder layers' copies (Module::DropDerivedCopies),
  // at most the weights again.
  absl::StatusOr<TierBytes> plain =
      factory.ProjectedTierBytes(kBertDirectory, BertConfig());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(plain->hot, plain->warm);
  EXPECT_LE(plain->hot - plain->warm, plain->warm);
  EXPECT_LT(plain->cool, plain->warm / 10) << "buffers only";

  // Transient compute copies: their bound counts hot and warm, not cool (a
  // request promotes a cool model before it runs).
  inference::ModelConfig transient = BertConfig();
  transient.mutable_weights()->set_compute_copy(
      inference::COMPUTE_COPY_TRANSIENT);
  transient.mutable_weights()->mutable_casting()->set_storage_dtype(
      inference::STORAGE_DTYPE_BF16);
  absl::StatusOr<TierBytes> bounded =
      factory.ProjectedTierBytes(kBertDirectory, transient);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_EQ(bounded->cool, plain->cool) << "buffers only";
  // The same bf16 storage as the cached config's, and the bound beside it.
  EXPECT_GT(bounded->warm - bounded->cool, tiers->warm - tiers->cool);
}

TEST(HfServedModelFactoryTest, FillsTheSignatureWithoutTheBatchDimension) {
  HfServedModelFactory factory(RunfilesOptions());
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, BertConfig(), nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const inference::ModelConfig& config = (*model)->config();
  EXPECT_EQ(config.platform(), "castserve_torch");
  ASSERT_EQ(config.input_size(), 3);
  EXPECT_EQ(config.input(0).name(), "input_ids");
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_INT64);
  EXPECT_EQ(config.input(0).dims_size(), 1);
  EXPECT_EQ(config.input(0).dims(0), -1);
  EXPECT_FALSE(config.input(0).optional());
  EXPECT_TRUE(config.input(1).optional());
  ASSERT_GE(config.output_size(), 1);
  EXPECT_EQ(config.output(0).name(), "last_hidden_state");
  EXPECT_EQ(config.output(0).data_type(), inference::TYPE_FP32);
  ASSERT_EQ(config.output(0).dims_size(), 2);
  EXPECT_EQ(config.output(0).dims(1), kHiddenSize);

  inference::ModelConfig unbatched = BertConfig();
  unbatched.set_max_batch_size(0);
  unbatched.clear_dynamic_batching();
  model = factory.Create(kBertDirectory, unbatched, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().input(0).dims_size(), 2);  // Batch kept.
}

TEST(HfServedModelFactoryTest, ConfiguredSignatureIsCheckedAgainstTheModel) {
  const std::vector<models::TensorSpec> inputs = {
      {"input_ids", at::kLong, {-1, -1}, false},
      {"attention_mask", at::kLong, {-1, -1}, true}};
  const std::vector<models::TensorSpec> outputs = {
      {"last_hidden_state", at::kFloat, {-1, -1, 32}, false}};
  auto with_input = [](const std::string& name, inference::DataType type,
                       std::vector<int64_t> dims) {
    inference::ModelConfig config;
    config.set_max_batch_size(8);
    inference::ModelInput* input = config.add_input();
    input->set_name(name);
    input->set_data_type(type);
    input->mutable_dims()->Add(dims.begin(), dims.end());
    return config;
  };
  inference::ModelConfig fixed =
      with_input("input_ids", inference::TYPE_INT64, {16});
  EXPECT_TRUE(ApplySignature(inputs, outputs, &fixed).ok());
  EXPECT_EQ(fixed.output_size(), 1);  // Outputs still filled in.

  for (inference::ModelConfig bad :
       {with_input("input_ids", inference::TYPE_INT32, {-1}),
        with_input("input_ids", inference::TYPE_INT64, {-1, -1}),
        with_input("pixel_values", inference::TYPE_INT64, {-1}),
        with_input("attention_mask", inference::TYPE_INT64, {-1})}) {
    EXPECT_EQ(ApplySignature(inputs, outputs, &bad).code(),
              absl::StatusCode::kInvalidArgument)
        << bad.DebugString();
  }
  inference::ModelConfig wrong_output;
  inference::ModelOutput* output = wrong_output.add_output();
  output->set_name("last_hidden_state");
  output->set_data_type(inference::TYPE_FP32);
  output->add_dims(-1);
  output->add_dims(-1);
  output->add_dims(64);
  EXPECT_EQ(ApplySignature(inputs, outputs, &wrong_output).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfServedModelFactoryTest, TextInputJoinsTheConfigWhenThereIsATokenizer) {
  std::unique_ptr<TextInput> text =
      TextInput::Create(std::make_shared<test_util::FakeTokenizer>(),
                        {{"input_ids", at::kLong, {-1, -1}}}, 0)
          .value();
  inference::ModelConfig config = BertConfig();
  ASSERT_TRUE(ApplyTextSignature(*text, &config).ok());
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_EQ(config.input(0).name(), "text");
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_STRING);
  EXPECT_EQ(std::vector<int64_t>(config.input(0).dims().begin(),
                                 config.input(0).dims().end()),
            std::vector<int64_t>{1});
  EXPECT_TRUE(config.input(0).optional());
  // Listed already: checked, not added twice.
  EXPECT_TRUE(ApplyTextSignature(*text, &config).ok());
  EXPECT_EQ(config.input_size(), 1);
  config.mutable_input(0)->set_data_type(inference::TYPE_INT64);
  EXPECT_EQ(ApplyTextSignature(*text, &config).message(),
            "config input text must be TYPE_STRING with dims [1] (one string "
            "per batch element)");

  std::unique_ptr<TextInput> none = TextInput::Unavailable(
      "input 'text': the model folder m has no tokenizer");
  inference::ModelConfig plain = BertConfig();
  EXPECT_TRUE(ApplyTextSignature(*none, &plain).ok());
  EXPECT_EQ(plain.input_size(), 0);
  plain.add_input()->set_name("text");
  EXPECT_EQ(ApplyTextSignature(*none, &plain).message(),
            "config lists input text, but input 'text': the model folder m "
            "has no tokenizer");
}

// Sends one string as the `text` input ([1, 1]) and waits for the answer.
absl::Status InferText(ServedModel& model, const std::string& value) {
  inference::ModelInferRequest request;
  inference::ModelInferRequest::InferInputTensor* text = request.add_inputs();
  text->set_name("text");
  text->set_datatype("BYTES");
  text->add_shape(1);
  text->add_shape(1);
  text->mutable_contents()->add_bytes_contents(value);
  inference::ModelInferResponse response;
  InferenceCall call;
  call.request = &request;
  call.response = &response;
  std::promise<absl::Status> done;
  model.Infer(std::move(call),
              [&done](absl::Status status) { done.set_value(status); });
  return done.get_future().get();
}

TEST(HfServedModelFactoryTest, FolderWithoutTokenizerRefusesText) {
  HfServedModelFactory factory(RunfilesOptions());
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, BertConfig(), nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const TensorSpec& input : (*model)->inputs()) {
    EXPECT_NE(input.name, "text");
  }
  const absl::Status status = InferText(**model, "hello");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(status.message()),
      ::testing::HasSubstr("input 'text': the model folder " +
                           std::string(kBertDirectory) + " has no tokenizer"));
}

// A folder with a SentencePiece tokenizer.model (libsentencepiece carries a
// protobuf of its own, which once crashed the daemon's at start): the model
// loads and serves its token inputs, and text is served or refused with the
// reason, never a crash.
TEST(HfServedModelFactoryTest, SentencePieceFolderNeverFailsTheLoad) {
  const std::string folder =
      models::test_util::MakeScratchDir("bert_sentencepiece");
  for (const char* name : {"config.json", "model.safetensors"}) {
    fs::copy_file(fs::path(kBertDirectory) / name, fs::path(folder) / name);
  }
  fs::copy_file("text/testdata/sentencepiece/tokenizer.model",
                fs::path(folder) / "tokenizer.model");
  HfServedModelFactory factory(RunfilesOptions());
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(folder, BertConfig(), nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  InferenceResult result = InferNow(**model, ReferenceRequest(Reference()));
  EXPECT_TRUE(result.outputs.ok()) << result.outputs.status();
  // libsentencepiece is loaded in isolation
  // (text/sentencepiece/sentencepiece_model.cc), so the tokenizer loads and the
  // model takes text.
  EXPECT_EQ((*model)->inputs().back().name, "text");
  const absl::Status status = InferText(**model, "hello world");
  if (!status.ok()) {
    // Served text whose ids leave the fixture's small vocabulary.
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("vocabulary"));
  }
}

TEST(HfServedModelFactoryTest, WeightPolicyFollowsTheConfig) {
  inference::WeightPolicy weights;
  weights.set_residency(inference::RESIDENCY_MAPPED);
  weights.set_compute_copy(inference::COMPUTE_COPY_TRANSIENT);
  weights.set_materialization(inference::MATERIALIZATION_EAGER);
  weights.set_prefetch(true);
  weights.set_reuse_transient_buffers(true);
  inference::LayerwiseCasting* casting = weights.mutable_casting();
  casting->set_storage_dtype(inference::STORAGE_DTYPE_F8_E4M3FN);
  casting->set_compute_dtype(inference::COMPUTE_DTYPE_BF16);
  casting->set_scaling(inference::SCALING_PER_ROW);
  casting->add_skip_modules_pattern("pooler");
  casting->add_skip_modules_classes("Embedding");

  absl::StatusOr<models::WeightPolicyOptions> options =
      WeightPolicyFromConfig(weights);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->residency, casting::Residency::kMapped);
  EXPECT_EQ(options->compute_copy, casting::ComputeCopyPolicy::kTransient);
  EXPECT_TRUE(options->eager);
  EXPECT_TRUE(options->prefetch);
  EXPECT_TRUE(options->reuse_transient_buffers);
  EXPECT_EQ(options->compute_dtype, casting::ElementType::kBF16);
  ASSERT_TRUE(options->casting.has_value());
  const casting::CastingPolicy::Options& policy = options->casting->options();
  EXPECT_EQ(policy.storage_dtype, casting::ElementType::kF8E4M3FN);
  EXPECT_EQ(policy.scaling, casting::Scaling::kPerRow);
  std::vector<std::string> patterns =
      casting::CastingPolicy::DefaultSkipModulesPattern();
  patterns.push_back("pooler");
  EXPECT_EQ(policy.skip_modules_pattern, patterns);
  EXPECT_EQ(policy.skip_modules_classes, std::vector<std::string>{"Embedding"});

  casting->set_no_default_skip_patterns(true);
  casting->set_storage_dtype(inference::STORAGE_DTYPE_BF16);  // Not fp8.
  options = WeightPolicyFromConfig(weights);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->casting->options().skip_modules_pattern,
            std::vector<std::string>{"pooler"});
  EXPECT_EQ(options->casting->options().scaling, casting::Scaling::kNone);

  casting->add_skip_modules_pattern("(unclosed");
  EXPECT_EQ(WeightPolicyFromConfig(weights).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(WeightPolicyFromConfig(inference::WeightPolicy())->casting);
}

TEST(HfServedModelFactoryTest, ResidencySaysWhereStorageLives) {
  inference::WeightPolicy weights;
  struct Case {
    inference::Residency residency;
    casting::Residency expected;
    bool on_host;
  };
  for (const Case& c :
       {Case{inference::RESIDENCY_RESIDENT, casting::Residency::kResident,
             false},
        Case{inference::RESIDENCY_MAPPED, casting::Residency::kMapped, false},
        Case{inference::RESIDENCY_HOST, casting::Residency::kResident, true}}) {
    weights.set_residency(c.residency);
    absl::StatusOr<models::WeightPolicyOptions> options =
        WeightPolicyFromConfig(weights);
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->residency, c.expected) << c.residency;
    EXPECT_EQ(options->storage_on_host, c.on_host) << c.residency;
  }
  weights.set_residency(static_cast<inference::Residency>(7));
  absl::Status unknown = WeightPolicyFromConfig(weights).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()),
              ::testing::HasSubstr("weights.residency: unknown value 7"));
}

// Serves `config` (fp8 e4m3 per-row storage, f32 compute, transient copies)
// and compares with the round-trip reference.
void ExpectRoundTripReference(inference::ModelConfig config) {
  inference::WeightPolicy* weights = config.mutable_weights();
  weights->set_compute_copy(inference::COMPUTE_COPY_TRANSIENT);
  weights->set_materialization(inference::MATERIALIZATION_EAGER);
  weights->mutable_casting()->set_storage_dtype(
      inference::STORAGE_DTYPE_F8_E4M3FN);
  weights->mutable_casting()->set_compute_dtype(inference::COMPUTE_DTYPE_F32);
  weights->mutable_casting()->set_scaling(inference::SCALING_PER_ROW);
  HfServedModelFactory factory(RunfilesOptions());
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, config, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  // Eager: the narrow copies exist and were made under the model's tag.
  EXPECT_GT((*model)->footprint().total_resident_bytes(), 0);
  EXPECT_GT((*model)->tracked_bytes(), 0);

  const auto reference = Reference();
  InferenceResult result = InferNow(**model, ReferenceRequest(reference));
  ASSERT_TRUE(result.outputs.ok()) << result.outputs.status();
  EXPECT_LT(
      models::test_util::RelativeMaxError(
          result.outputs->at("last_hidden_state"),
          reference.at("roundtrip.F8_E4M3FN:per_row.output.last_hidden_state")),
      1e-4);
}

// On the CPU, host residency is resident storage: same copies, same result.
TEST(HfServedModelFactoryTest, LayerwiseCastingMatchesTheRoundTripReference) {
  for (inference::Residency residency :
       {inference::RESIDENCY_RESIDENT, inference::RESIDENCY_HOST}) {
    SCOPED_TRACE(inference::Residency_Name(residency));
    inference::ModelConfig config = BertConfig();
    config.mutable_weights()->set_residency(residency);
    ExpectRoundTripReference(config);
  }
}

TEST(HfServedModelFactoryTest, UnloadReleasesTheTrackedMemory) {
  ASSERT_TRUE(casting::TrackingAllocator::InstallTrackingCpuAllocator().ok());
  casting::TrackingAllocator* tracker = casting::TrackingAllocator::Installed();
  HfServedModelFactory factory(RunfilesOptions());
  inference::ModelConfig config = BertConfig();
  config.mutable_weights()->set_materialization(
      inference::MATERIALIZATION_EAGER);
  // First cycle warms LibTorch's lazily made state.
  for (int i = 0; i < 2; ++i) {
    const int64_t before = tracker->AllocatedBytes();
    absl::StatusOr<std::shared_ptr<ServedModel>> model =
        factory.Create(kBertDirectory, config, nullptr);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_TRUE(InferNow(**model, ReferenceRequest(Reference())).outputs.ok());
    EXPECT_GT((*model)->tracked_bytes(), 0);
    model->reset();
    if (i == 1) {
      EXPECT_EQ(tracker->AllocatedBytes(), before);
    }
  }
}

TEST(HfServedModelFactoryTest, CheckpointPathStaysInsideTheRepository) {
  EXPECT_EQ(*CheckpointFolder("/repo/m", ""), "/repo/m");
  EXPECT_EQ(*CheckpointFolder("/repo/m", "ckpt"), "/repo/m/ckpt");
  EXPECT_EQ(*CheckpointFolder("/repo/m/", "./ckpt/"), "/repo/m/ckpt/");
  EXPECT_EQ(*CheckpointFolder("/repo/m", "../shared/ckpt"),
            "/repo/shared/ckpt");
  for (const std::string& path :
       {std::string("/etc"), std::string("../../etc"),
        std::string("ckpt/../../../x"), std::string("a\0b", 3)}) {
    EXPECT_EQ(CheckpointFolder("/repo/m", path).status().code(),
              absl::StatusCode::kInvalidArgument)
        << path;
  }
  HfServedModelFactory factory(RunfilesOptions());
  inference::ModelConfig config = BertConfig();
  config.mutable_checkpoint()->set_path("/models/testdata/bert");
  EXPECT_EQ(factory.Create(kBertDirectory, config, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  config.mutable_checkpoint()->set_path("missing");
  const absl::Status missing =
      factory.Create(kBertDirectory, config, nullptr).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("missing"), absl::string_view::npos);
}

TEST(HfServedModelFactoryTest, WarmupRequestsRunBeforeTheModelIsReturned) {
  HfServedModelFactory factory(RunfilesOptions());
  inference::ModelConfig config = BertConfig();
  inference::ModelWarmup* warmup = config.add_model_warmup();
  warmup->set_name("zeros");
  warmup->set_batch_size(2);
  warmup->set_count(2);
  inference::ModelWarmup::Input& ids = (*warmup->mutable_inputs())["input_ids"];
  ids.set_data_type(inference::TYPE_INT64);
  ids.add_dims(8);
  ids.set_random_data(true);
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, config, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->statistics().execution_count, 0u);  // Not counted.

  ids.set_data_type(inference::TYPE_FP32);
  EXPECT_EQ(factory.Create(kBertDirectory, config, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  ids.set_data_type(inference::TYPE_INT64);
  ids.set_input_data_file("../../outside.bin");
  EXPECT_EQ(factory.Create(kBertDirectory, config, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfServedModelFactoryTest, WarmupDataFileIsRepeatedOverTheBatch) {
  const fs::path directory =
      fs::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                          : "/tmp") /
      "warmup_model";
  fs::create_directories(directory);
  const std::vector<int64_t> ids = {1, 2, 3};
  std::ofstream(directory / "ids.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), 3 * sizeof(int64_t));
  inference::ModelConfig config = BertConfig();
  config.add_input()->set_name("input_ids");
  config.mutable_input(0)->set_data_type(inference::TYPE_INT64);
  config.mutable_input(0)->add_dims(-1);
  inference::ModelWarmup warmup;
  warmup.set_batch_size(2);
  inference::ModelWarmup::Input& input =
      (*warmup.mutable_inputs())["input_ids"];
  input.set_data_type(inference::TYPE_INT64);
  input.add_dims(3);
  input.set_input_data_file("ids.bin");
  absl::StatusOr<models::NamedTensors> request =
      MakeWarmupRequest(warmup, config, directory.string(), 1 << 20);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(
      at::equal(request->at("input_ids"),
                at::tensor({1, 2, 3, 1, 2, 3}, at::kLong).view({2, 3})));
  input.clear_dims();
  input.add_dims(4);  // 32 bytes: neither one item nor the batch.
  EXPECT_EQ(MakeWarmupRequest(warmup, config, directory.string(), 1 << 20)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A config with one warmup of input_ids [batch 1, dims...].
inference::ModelConfig WarmupConfig(std::vector<int64_t> dims,
                                    uint32_t count = 1) {
  inference::ModelConfig config = BertConfig();
  inference::ModelWarmup* warmup = config.add_model_warmup();
  warmup->set_name("big");
  warmup->set_count(count);
  inference::ModelWarmup::Input& ids = (*warmup->mutable_inputs())["input_ids"];
  ids.set_data_type(inference::TYPE_INT64);
  for (int64_t dim : dims) ids.add_dims(dim);
  return config;
}

void ExpectLoadFails(HfServedModelFactory& factory,
                     const inference::ModelConfig& config,
                     absl::StatusCode code, const std::string& message) {
  absl::StatusOr<std::shared_ptr<ServedModel>> model =
      factory.Create(kBertDirectory, config, nullptr);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), code) << model.status();
  EXPECT_THAT(std::string(model.status().message()),
              ::testing::HasSubstr(message));
}

TEST(HfServedModelFactoryTest, ConfigSizesAreCheckedBeforeAnythingIsAllocated) {
  FactoryOptions options = RunfilesOptions();
  options.max_warmup_request_bytes = 1 << 20;
  options.max_instances = 8;
  HfServedModelFactory factory(options);
  // 10^12 int64 ids: refused by arithmetic, never allocated.
  ExpectLoadFails(factory, WarmupConfig({1000000, 1000000}),
                  absl::StatusCode::kInvalidArgument,
                  "past the limit of 1048576 bytes (--max-message-bytes)");
  ExpectLoadFails(factory, WarmupConfig({int64_t{1} << 62, 4}),
                  absl::StatusCode::kInvalidArgument, "past the limit");
  ExpectLoadFails(factory, WarmupConfig({8}, 4000000000u),
                  absl::StatusCode::kInvalidArgument,
                  "count 4000000000, above the limit of 1000");
  inference::ModelConfig many = BertConfig();
  many.add_instance_group()->set_count(1500);
  ExpectLoadFails(factory, many, absl::StatusCode::kInvalidArgument,
                  "1500 instances, above the limit of 8");
  // Within the limits the same model loads.
  EXPECT_TRUE(factory.Create(kBertDirectory, WarmupConfig({8}), nullptr).ok());
}

// A clock that moves one minute each time it is read.
class TickingClock final : public platform::Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    now_ += absl::Minutes(1);
    ++reads_;
    return now_;
  }
  bool AwaitWithDeadline(absl::Mutex*, const absl::Condition& condition,
                         absl::Time) override {
    return condition.Eval();
  }
  bool WaitWithDeadline(absl::CondVar*, absl::Mutex*, absl::Time) override {
    return true;
  }
  int reads() {
    absl::MutexLock lock(&mu_);
    return reads_;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::UnixEpoch();
  int reads_ = 0;
};

TEST(HfServedModelFactoryTest, WarmupsStopAtTheirTimeLimit) {
  FactoryOptions options = RunfilesOptions();
  options.max_warmup_duration = absl::Minutes(5);
  TickingClock clock;
  options.clock = &clock;
  HfServedModelFactory factory(options);
  // The limit is set at the first read; runs 1 to 5 see minutes 2 to 6 of
  // the clock, the sixth check (minute 7) is past it: 5 of 1000 runs.
  ExpectLoadFails(factory, WarmupConfig({8}, 1000),
                  absl::StatusCode::kDeadlineExceeded,
                  "(--max-warmup-seconds)");
  EXPECT_EQ(clock.reads(), 7);
}

TEST(HfServedModelFactoryTest, WarmupDataMustBeARegularFileOfTheInputsSize) {
  const fs::path directory =
      fs::path(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                          : "/tmp") /
      "warmup_limits_model";
  fs::create_directories(directory);
  fs::remove(directory / "zeros.bin");
  fs::create_symlink("/dev/zero", directory / "zeros.bin");
  std::ofstream(directory / "big.bin", std::ios::binary)
      << std::string(1000, 'x');
  inference::ModelConfig config = BertConfig();
  inference::ModelWarmup warmup;
  inference::ModelWarmup::Input& input =
      (*warmup.mutable_inputs())["input_ids"];
  input.set_data_type(inference::TYPE_INT64);
  input.add_dims(3);
  config.add_input()->set_name("input_ids");
  config.mutable_input(0)->set_data_type(inference::TYPE_INT64);
  config.mutable_input(0)->add_dims(-1);
  input.set_input_data_file("zeros.bin");
  absl::StatusOr<models::NamedTensors> request =
      MakeWarmupRequest(warmup, config, directory.string(), 1 << 20);
  ASSERT_FALSE(request.ok());
  EXPECT_THAT(std::string(request.status().message()),
              ::testing::HasSubstr("is not a readable regular file"));
  input.set_input_data_file("big.bin");  // 1000 bytes for a 24-byte input
  request = MakeWarmupRequest(warmup, config, directory.string(), 1 << 20);
  ASSERT_FALSE(request.ok());
  EXPECT_THAT(std::string(request.status().message()),
              ::testing::HasSubstr("holds more than 24 bytes"));
}

TEST(IntraOpThreadsForTest, ParameterThenFlagThenCoresPerInstance) {
  inference::ModelConfig config;
  // No flag: the cores divided by the instances, at least 1.
  EXPECT_EQ(*IntraOpThreadsFor(config, 0, 16), 16);
  config.add_instance_group()->set_count(4);
  EXPECT_EQ(*IntraOpThreadsFor(config, 0, 16), 4);
  EXPECT_EQ(*IntraOpThreadsFor(config, 0, 2), 1);
  // The flag wins over the rule, the model's parameter over the flag.
  EXPECT_EQ(*IntraOpThreadsFor(config, 3, 16), 3);
  (*config.mutable_parameters())["INTRA_OP_THREAD_COUNT"].set_string_value("5");
  EXPECT_EQ(*IntraOpThreadsFor(config, 3, 16), 5);
  for (const char* bad : {"0", "-2", "two", "1025", ""}) {
    (*config.mutable_parameters())["INTRA_OP_THREAD_COUNT"].set_string_value(
        bad);
    absl::StatusOr<int> threads = IntraOpThreadsFor(config, 3, 16);
    ASSERT_FALSE(threads.ok()) << bad;
    EXPECT_EQ(threads.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(threads.status().message()),
                ::testing::HasSubstr("INTRA_OP_THREAD_COUNT"));
  }
}

TEST(HfServedModelFactoryTest, GpuModelWithoutACudaDeviceIsUnavailable) {
  if (casting::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device exists";
  HfServedModelFactory factory(RunfilesOptions());
  inference::ModelConfig config = BertConfig();
  inference::ModelInstanceGroup* group = config.add_instance_group();
  group->set_kind(inference::ModelInstanceGroup::KIND_GPU);
  group->add_gpus(0);
  const absl::Status status =
      factory.Create(kBertDirectory, config, nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("no CUDA device"));
  if (!casting::BuiltWithCuda()) {
    EXPECT_THAT(
        std::string(status.message()),
        ::testing::HasSubstr("built without CUDA: bazel build --config=cuda"));
  }
}

TEST(HfServedModelFactoryTest, GpuModelServesOnCuda0) {
  if (casting::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  HfServedModelFactory factory(RunfilesOptions());
  inference::ModelConfig config = BertConfig();
  config.add_instance_group()->set_kind(
      inference::ModelInstanceGroup::KIND_GPU);
  absl::StatusOr<std::shared_ptr<ServedModel>> served =
      factory.Create(kBertDirectory, config, nullptr);
  EXPECT_TRUE(served.ok()) << served.status();
}

TEST(DeviceFromConfigTest, KindGpuSelectsItsCudaDevice) {
  inference::ModelConfig config;
  EXPECT_EQ(*DeviceFromConfig(config), casting::Device::Cpu());
  inference::ModelInstanceGroup* group = config.add_instance_group();
  group->set_kind(inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(*DeviceFromConfig(config), casting::Device::Cuda(0));
  group->add_gpus(3);
  EXPECT_EQ(*DeviceFromConfig(config), casting::Device::Cuda(3));
  // Two groups on one device.
  inference::ModelInstanceGroup* second = config.add_instance_group();
  second->set_kind(inference::ModelInstanceGroup::KIND_GPU);
  second->add_gpus(3);
  second->set_count(2);
  EXPECT_EQ(*DeviceFromConfig(config), casting::Device::Cuda(3));
}

TEST(DeviceFromConfigTest, CpuAutoAndModelKindsStayOnTheCpu) {
  for (auto kind : {inference::ModelInstanceGroup::KIND_CPU,
                    inference::ModelInstanceGroup::KIND_AUTO,
                    inference::ModelInstanceGroup::KIND_MODEL}) {
    inference::ModelConfig config;
    config.add_instance_group()->set_kind(kind);
    EXPECT_EQ(*DeviceFromConfig(config), casting::Device::Cpu()) << kind;
  }
}

TEST(DeviceFromConfigTest, RejectsNegativeOrdinalsAndSeveralDevices) {
  inference::ModelConfig config;
  inference::ModelInstanceGroup* group = config.add_instance_group();
  group->set_kind(inference::ModelInstanceGroup::KIND_GPU);
  group->add_gpus(-1);
  EXPECT_EQ(DeviceFromConfig(config).status().code(),
            absl::StatusCode::kInvalidArgument);
  group->clear_gpus();
  group->add_gpus(0);
  group->add_gpus(1);
  absl::Status status = DeviceFromConfig(config).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("cuda:0 and cuda:1"));
  inference::ModelConfig mixed;
  mixed.add_instance_group()->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  mixed.add_instance_group()->set_kind(inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(DeviceFromConfig(mixed).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace castserve
