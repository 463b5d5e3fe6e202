// Makes the casting::Weights of a model's modules as its weight policy
// (models/loading/weight_policy.h) decides: the factory finds and checks each
// checkpoint entry, then takes WeightOptionsFor's answer for it.
#ifndef CASTSERVE_MODELS_LOADING_WEIGHT_FACTORY_H_
#define CASTSERVE_MODELS_LOADING_WEIGHT_FACTORY_H_

#include <c10/core/ScalarType.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "casting/formats/checkpoint.h"
#include "casting/memory/buffer_pool.h"
#include "casting/weight.h"
#include "models/loading/weight_policy.h"

namespace castserve::models {

// The first of `candidate_prefixes` ("" included if listed) for which
// `checkpoint` has `<prefix><probe_key>`: how an architecture finds its
// weights inside a checkpoint saved from a wrapping model ("bert." in a
// BertForMaskedLM). NotFound listing the keys tried.
absl::StatusOr<std::string> FindKeyPrefix(
    const casting::Checkpoint& checkpoint, absl::string_view probe_key,
    const std::vector<std::string>& candidate_prefixes);

// Thread-compatible; Make is const and may be called concurrently. Copies
// share the buffer pool.
class WeightFactory {
 public:
  // A module name's checkpoint key: `module_prefix` dropped from its start
  // (when it starts so), then `key_prefix` put in front. "bert." as
  // key_prefix for a BertModel saved inside BertForMaskedLM;
  // "vision_model." as module_prefix for a SiglipVisionModel saved by
  // transformers 5, whose keys lack it; both "" otherwise.
  WeightFactory(std::shared_ptr<const casting::Checkpoint> checkpoint,
                WeightPolicyOptions options, std::string key_prefix = "",
                std::string module_prefix = "");

  // A factory for the same checkpoint and policy, sharing this one's buffer
  // pool, whose keys start with `key_prefix` instead (a model's head beside
  // its prefixed backbone: "classifier." next to "bert.").
  WeightFactory WithKeyPrefix(std::string key_prefix) const;

  // The weight `<key of module_name>.<local_name>` of a module of `kind`,
  // checked against what the architecture expects of it from config.json:
  // NotFound naming the key when the checkpoint lacks it; InvalidArgument
  // naming the key, the expected and the found shape when its shape is not
  // `expected_shape` ("weight 'k': expected shape [64, 32], found
  // [211, 32]"), and naming its dtype when that is not a floating type the
  // casting layer computes with; the Weight's errors otherwise. The checks
  // read the checkpoint header only, whatever the policy; tensor data is
  // read only when the policy is eager, and only once they passed.
  absl::StatusOr<std::unique_ptr<casting::Weight>> Make(
      absl::string_view module_name, absl::string_view kind,
      absl::string_view local_name,
      absl::Span<const int64_t> expected_shape) const;

  // True when the checkpoint has `<prefix><module_name>.<local_name>`.
  bool Has(absl::string_view module_name, absl::string_view local_name) const;

  // The checkpoint entry of `<prefix><module_name>.<local_name>`, or nullptr.
  const casting::TensorEntry* Find(absl::string_view module_name,
                                   absl::string_view local_name) const;

  // EffectiveComputeDtype(options()), and as a LibTorch scalar type.
  casting::ElementType compute_dtype() const;
  at::ScalarType compute_scalar_type() const;
  const std::string& key_prefix() const { return key_prefix_; }

  const casting::Checkpoint& checkpoint() const { return *checkpoint_; }
  const WeightPolicyOptions& options() const { return options_; }

 private:
  std::string Key(absl::string_view module_name,
                  absl::string_view local_name) const;

  std::shared_ptr<const casting::Checkpoint> checkpoint_;
  WeightPolicyOptions options_;
  std::string key_prefix_;
  std::string module_prefix_;
  // Shared by the weights made; null without transient copies.
  std::shared_ptr<casting::BufferPool> buffer_pool_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LOADING_WEIGHT_FACTORY_H_
