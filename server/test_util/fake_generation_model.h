// A decoupled ServedModel that "generates" without a model, for the tests
// of the streaming protocols: inputs text_input BYTES [1] or input_ids INT64
// [-1] (exactly one), outputs text_output BYTES [1] and output_ids INT64
// [-1]. Token i is id 100 + i with the text "t<i> ", one every
// `token_interval`; the request's int parameter max_tokens (default 3)
// says how many ("parameter 'max_tokens' must be an integer, got ..."
// otherwise), and `fake_fail_after` (int) fails the call with INTERNAL
// "fake failure" after that many tokens. Every token but the last goes to
// partial_response when the call has one (its final response is the last
// token with triton_final_response and finish_reason "length"); a unary
// call gets all tokens in one response. Cancellation is polled before each
// token. Thread-safe; each call runs on the default executor.
#ifndef CASTSERVE_SERVER_TEST_UTIL_FAKE_GENERATION_MODEL_H_
#define CASTSERVE_SERVER_TEST_UTIL_FAKE_GENERATION_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/served_model.h"

namespace castserve::testing {

class FakeGenerationModel
    : public ServedModel,
      public std::enable_shared_from_this<FakeGenerationModel> {
 public:
  FakeGenerationModel(const std::string& name, absl::Duration token_interval);

  const inference::ModelConfig& config() const override { return config_; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  void Infer(InferenceCall call,
             std::function<void(absl::Status)> done) override;
  int64_t pending_requests() const override;
  ServedModelStatistics statistics() const override { return {}; }
  casting::Footprint footprint() const override { return {}; }
  int64_t tracked_bytes() const override { return 0; }

  // Waits up to `timeout` until `count` calls ended cancelled.
  bool AwaitCancelled(int count, absl::Duration timeout);
  // The prompt (ids, or the text's bytes) of the last call.
  std::string last_prompt() const;

 private:
  // Runs one call to its end on the executor's thread.
  void Generate(InferenceCall call, int64_t max_tokens, int64_t fail_after,
                std::function<void(absl::Status)> done);

  inference::ModelConfig config_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  const absl::Duration token_interval_;
  mutable absl::Mutex mutex_;
  int running_ ABSL_GUARDED_BY(mutex_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string last_prompt_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace castserve::testing

#endif  // CASTSERVE_SERVER_TEST_UTIL_FAKE_GENERATION_MODEL_H_
