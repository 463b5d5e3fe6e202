// libFuzzer target: config.pbtxt text through ParseModelConfig (text format,
// name, ValidateModelConfig), then what a load does with the config before
// and around the model (server/fuzz/load_checks.h). Built by
// tools/run_fuzzers.sh; run from the repository root.
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/fuzz/bert_fixture.h"
#include "server/fuzz/load_checks.h"
#include "server/lifecycle/model_config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = castserve::fuzz;
  absl::StatusOr<inference::ModelConfig> config = castserve::ParseModelConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size),
      fuzz::kFuzzModelName);
  fuzz::TrapUnless(config.ok() || absl::IsInvalidArgument(config.status()),
                   config.status(), "a config is refused as INVALID_ARGUMENT");
  if (!config.ok()) return 0;
  fuzz::RunLoadChecks(*config);
  return 0;
}
