// libFuzzer target: the `config` parameter of RepositoryModelLoad, JSON
// parsed into a ModelConfig as server/grpc/inference_service.cc does
// (JsonStringToMessage) and checked as the model manager checks an override
// (ValidateModelConfig), then what a load does with the config before and
// around the model (server/fuzz/load_checks.h). Built by
// tools/run_fuzzers.sh; run from the repository root.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/util/json_util.h"
#include "server/fuzz/bert_fixture.h"
#include "server/fuzz/load_checks.h"
#include "server/lifecycle/model_config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = castserve::fuzz;
  inference::ModelConfig config;
  const std::string json(reinterpret_cast<const char*>(data), size);
  if (!google::protobuf::util::JsonStringToMessage(json, &config).ok()) {
    return 0;
  }
  config.set_name(fuzz::kFuzzModelName);
  const absl::Status valid = castserve::ValidateModelConfig(config);
  fuzz::TrapUnless(valid.ok() || absl::IsInvalidArgument(valid), valid,
                   "a config is refused as INVALID_ARGUMENT");
  if (!valid.ok()) return 0;
  fuzz::RunLoadChecks(config);
  return 0;
}
