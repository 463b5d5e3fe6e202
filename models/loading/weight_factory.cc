#include "models/loading/weight_factory.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "casting/device/torch_types.h"

namespace castserve::models {

absl::StatusOr<std::string> FindKeyPrefix(
    const casting::Checkpoint& checkpoint, absl::string_view probe_key,
    const std::vector<std::string>& candidate_prefixes) {
  std::vector<std::string> tried;
  for (const std::string& prefix : candidate_prefixes) {
    std::string key = absl::StrCat(prefix, probe_key);
    if (checkpoint.Find(key) != nullptr) return prefix;
    tried.push_back(std::move(key));
  }
  return absl::NotFoundError(absl::StrCat(
      "checkpoint has none of the tensors ", absl::StrJoin(tried, ", "), " (",
      checkpoint.tensors().size(), " tensors in it)"));
}

WeightFactory::WeightFactory(
    std::shared_ptr<const casting::Checkpoint> checkpoint,
    WeightPolicyOptions options, std::string key_prefix,
    std::string module_prefix)
    : checkpoint_(std::move(checkpoint)),
      options_(std::move(options)),
      key_prefix_(std::move(key_prefix)),
      module_prefix_(std::move(module_prefix)) {
  if (UsesBufferPool(options_)) {
    buffer_pool_ = std::make_shared<casting::BufferPool>();
  }
}

WeightFactory WeightFactory::WithKeyPrefix(std::string key_prefix) const {
  WeightFactory copy = *this;
  copy.key_prefix_ = std::move(key_prefix);
  return copy;
}

std::string WeightFactory::Key(absl::string_view module_name,
                               absl::string_view local_name) const {
  absl::ConsumePrefix(&module_name, module_prefix_);
  return absl::StrCat(key_prefix_, module_name, ".", local_name);
}

const casting::TensorEntry* WeightFactory::Find(
    absl::string_view module_name, absl::string_view local_name) const {
  return checkpoint_->Find(Key(module_name, local_name));
}

bool WeightFactory::Has(absl::string_view module_name,
                        absl::string_view local_name) const {
  return Find(module_name, local_name) != nullptr;
}

casting::ElementType WeightFactory::compute_dtype() const {
  return EffectiveComputeDtype(options_);
}

at::ScalarType WeightFactory::compute_scalar_type() const {
  return casting::TorchScalarType(compute_dtype());
}

namespace {

// InvalidArgument naming the tensor unless `entry` has `expected` shape.
absl::Status CheckShape(const casting::TensorEntry& entry,
                        absl::Span<const int64_t> expected) {
  if (absl::MakeConstSpan(entry.shape) == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("weight '", entry.name, "': expected shape [",
                   absl::StrJoin(expected, ", "), "], found [",
                   absl::StrJoin(entry.shape, ", "), "]"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<casting::Weight>> WeightFactory::Make(
    absl::string_view module_name, absl::string_view kind,
    absl::string_view local_name,
    absl::Span<const int64_t> expected_shape) const {
  const std::string key = Key(module_name, local_name);
  const casting::TensorEntry* entry = checkpoint_->Find(key);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("checkpoint has no tensor '", key,
                                            "' (weight '", local_name, "' of ",
                                            kind, " '", module_name, "')"));
  }
  if (absl::Status shape = CheckShape(*entry, expected_shape); !shape.ok()) {
    return shape;
  }
  casting::WeightOptions weight_options =
      WeightOptionsFor(options_, module_name, kind);
  if (const PrequantizedWeight* prequantized =
          options_.prequantized != nullptr ? options_.prequantized->Find(key)
                                           : nullptr) {
    // Stored as the file holds it, whatever storage the policy would give.
    weight_options.storage = prequantized->format;
    weight_options.scales_entry = prequantized->scales_key;
  }
  // A layer's parameters are floating; an integer tensor in their place is
  // a broken checkpoint, not a buffer to pass through.
  weight_options.pass_through_integers = false;
  weight_options.buffer_pool = buffer_pool_;
  absl::StatusOr<std::unique_ptr<casting::Weight>> weight =
      casting::Weight::Create(checkpoint_, key, weight_options);
  if (!weight.ok()) return weight.status();
  if (options_.eager) {
    absl::Status materialized = (*weight)->Materialize();
    if (!materialized.ok()) return materialized;
  }
  return weight;
}

}  // namespace castserve::models
