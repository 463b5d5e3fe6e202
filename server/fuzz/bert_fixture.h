// The model the server fuzz targets run against: the BERT fixture
// (models/testdata/bert, 2 layers, hidden size 32), loaded once. The targets
// are run from the repository root (tools/run_fuzzers.sh does).
#ifndef CASTSERVE_SERVER_FUZZ_BERT_FIXTURE_H_
#define CASTSERVE_SERVER_FUZZ_BERT_FIXTURE_H_

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "models/loading/model_loader.h"
#include "models/model.h"

namespace castserve::fuzz {

// Loaded on first use; aborts when the fixture cannot be loaded (the
// target then runs from the wrong folder). One LibTorch thread: each
// execution is small and the fuzzers share two cores.
inline const models::Model& BertFixture() {
  static const models::Model* const model = [] {
    at::set_num_threads(1);
    absl::StatusOr<std::unique_ptr<models::Model>> loaded =
        models::LoadHfModel("models/testdata/bert", {});
    if (!loaded.ok()) {
      std::fprintf(stderr, "cannot load models/testdata/bert: %s\n",
                   loaded.status().ToString().c_str());
      std::abort();
    }
    return loaded->release();
  }();
  return *model;
}

// Stops the target when `status` breaks an invariant of the code under test
// (a crash for libFuzzer, with the status printed).
inline void TrapUnless(bool holds, const absl::Status& status,
                       const char* invariant) {
  if (holds) return;
  std::fprintf(stderr, "invariant broken: %s: %s\n", invariant,
               status.ToString().c_str());
  __builtin_trap();
}

// Inputs up to this many elements each are run through the forward;
// larger ones only through the checks, to keep executions fast.
inline constexpr int64_t kMaxForwardElements = 1024;

// Model::Forward on `inputs` when they are small enough; its outputs if it
// ran and succeeded. The forward may refuse inputs only as INVALID_ARGUMENT
// (its checks); INTERNAL would say the checks let a bad input through.
inline std::optional<models::NamedTensors> ForwardIfSmall(
    const models::Model& model, const models::NamedTensors& inputs) {
  for (const auto& [name, tensor] : inputs) {
    if (tensor.numel() > kMaxForwardElements) return std::nullopt;
  }
  absl::StatusOr<models::NamedTensors> outputs = model.Forward(inputs);
  TrapUnless(outputs.ok() || absl::IsInvalidArgument(outputs.status()),
             outputs.status(), "a forward fails only with INVALID_ARGUMENT");
  if (!outputs.ok()) return std::nullopt;
  return *std::move(outputs);
}

}  // namespace castserve::fuzz

#endif  // CASTSERVE_SERVER_FUZZ_BERT_FIXTURE_H_
