// What a model load does with a config before and around the model itself,
// run on a fuzzed config without loading one: the pieces of
// HfServedModelFactory::Create
// (server/servables/factory/hf_served_model_factory.h), with the BERT fixture
// standing in for the loaded model.
#ifndef CASTSERVE_SERVER_FUZZ_LOAD_CHECKS_H_
#define CASTSERVE_SERVER_FUZZ_LOAD_CHECKS_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "proto/model_config.pb.h"
#include "server/fuzz/bert_fixture.h"
#include "server/servables/factory/hf_served_model_factory.h"

namespace castserve::fuzz {

// The name the fuzzed configs' model folder has.
inline constexpr char kFuzzModelName[] = "fuzz_model";

// A scratch repository with one model folder, `fuzz_model`, holding
// `warmup.bin` for warmup input_data_file: eight INT64 ones (64 bytes, valid
// token ids); removed at exit.
inline const std::string& ScratchModelDirectory() {
  static const std::string* const directory = [] {
    namespace fs = std::filesystem;
    const fs::path repository =
        fs::temp_directory_path() /
        ("castserve_fuzz_repository." + std::to_string(getpid()));
    const fs::path model = repository / kFuzzModelName;
    fs::create_directories(model);
    std::string ones(64, '\0');
    for (size_t i = 0; i < ones.size(); i += 8) ones[i] = '\1';
    std::ofstream(model / "warmup.bin", std::ios::binary) << ones;
    static const std::string removed = repository.string();
    std::atexit([] { fs::remove_all(removed); });
    return new std::string(model.string());
  }();
  return *directory;
}

// Warmup requests are bounded by this many bytes (the daemon's default is
// 256 MiB; less keeps executions fast and under libFuzzer's malloc limit).
inline constexpr int64_t kMaxWarmupRequestBytes = int64_t{1} << 20;

// The checks of a load on `config` (already validated as config.pbtxt or a
// RepositoryModelLoad config is): limits, threads, checkpoint folder and
// weight policy each on its own; the signature against the BERT fixture's;
// then each warmup request, run through the model when small.
inline void RunLoadChecks(const inference::ModelConfig& config) {
  FactoryOptions options;
  options.max_warmup_request_bytes = kMaxWarmupRequestBytes;
  (void)CheckConfigLimits(config, options);
  (void)IntraOpThreadsFor(config, /*default_threads=*/0,
                          /*hardware_threads=*/2);
  (void)CheckpointFolder(ScratchModelDirectory(), config.checkpoint().path());
  (void)WeightPolicyFromConfig(config.weights());

  const models::Model& model = BertFixture();
  inference::ModelConfig effective = config;
  if (!ApplySignature(model.inputs(), model.outputs(), &effective).ok()) {
    return;
  }
  for (const inference::ModelWarmup& warmup : effective.model_warmup()) {
    absl::StatusOr<models::NamedTensors> request =
        MakeWarmupRequest(warmup, effective, ScratchModelDirectory(),
                          options.max_warmup_request_bytes);
    TrapUnless(request.ok() || absl::IsInvalidArgument(request.status()),
               request.status(), "a warmup is refused as INVALID_ARGUMENT");
    if (request.ok()) (void)ForwardIfSmall(model, *request);
  }
}

}  // namespace castserve::fuzz

#endif  // CASTSERVE_SERVER_FUZZ_LOAD_CHECKS_H_
