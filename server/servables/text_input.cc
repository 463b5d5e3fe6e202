#include "server/servables/text_input.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve {
namespace {

const models::TensorSpec* FindSpec(const std::vector<models::TensorSpec>& specs,
                                   const std::string& name) {
  for (const models::TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// An INT64 [batch, seq] token input.
bool IsTokenInput(const models::TensorSpec* spec) {
  return spec != nullptr && spec->dtype == at::kLong && spec->shape.size() == 2;
}

// Row r of `rows` into the [batch, width] tensor `out`, the rest of the row
// left as it is (the padding).
void CopyRow(const std::vector<int64_t>& row, int64_t r, at::Tensor& out) {
  std::copy(row.begin(), row.end(), out.data_ptr<int64_t>() + r * out.size(1));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TextInput>> TextInput::Create(
    std::shared_ptr<const text::Tokenizer> tokenizer,
    const std::vector<models::TensorSpec>& model_inputs, int64_t max_length,
    bool pairs) {
  ABSL_RAW_CHECK(tokenizer != nullptr, "TextInput needs a tokenizer");
  if (!IsTokenInput(FindSpec(model_inputs, "input_ids"))) {
    return absl::InvalidArgumentError(
        "the model takes no INT64 input_ids [batch, seq] for text to fill");
  }
  const bool mask = IsTokenInput(FindSpec(model_inputs, "attention_mask"));
  const bool types = IsTokenInput(FindSpec(model_inputs, "token_type_ids"));
  return std::unique_ptr<TextInput>(
      new TextInput(std::move(tokenizer), std::max<int64_t>(max_length, 0),
                    mask, types, pairs, ""));
}

std::unique_ptr<TextInput> TextInput::Unavailable(std::string reason) {
  return std::unique_ptr<TextInput>(
      new TextInput(nullptr, 0, false, false, false, std::move(reason)));
}

TextInput::TextInput(std::shared_ptr<const text::Tokenizer> tokenizer,
                     int64_t max_length, bool attention_mask,
                     bool token_type_ids, bool pairs, std::string reason)
    : tokenizer_(std::move(tokenizer)),
      max_length_(max_length),
      pad_id_(tokenizer_ != nullptr ? tokenizer_->pad_id().value_or(0) : 0),
      attention_mask_(attention_mask),
      token_type_ids_(token_type_ids),
      pairs_(pairs),
      reason_(std::move(reason)) {}

TensorSpec TextInput::WireSpec() {
  return {kTextInputName, "BYTES", {-1, 1}, /*optional=*/true};
}

std::vector<TensorSpec> TextInput::PairWireSpecs() {
  return {{kQueryInputName, "BYTES", {-1, 1}, /*optional=*/true},
          {kDocumentInputName, "BYTES", {-1, 1}, /*optional=*/true}};
}

absl::Status TextInput::Add(absl::StatusOr<text::Encoding> encoding, size_t i,
                            const char* input,
                            std::vector<text::Encoding>& encodings,
                            int64_t& longest) const {
  if (!encoding.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", input, "': element ", i, ": ", encoding.status().message()));
  }
  ABSL_RAW_CHECK(encoding->type_ids.size() == encoding->ids.size(),
                 "a tokenizer's type_ids and ids differ in length");
  if (encoding->ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", input, "': element ", i, " encodes to no token"));
  }
  const int64_t length = static_cast<int64_t>(encoding->ids.size());
  if (!attention_mask_ && i > 0 && length != longest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", input, "': element ", i, " has ", length,
        " tokens, element 0 ", longest,
        "; the model takes no attention_mask, so the texts of one request "
        "must have equal token counts (padding would change the result)"));
  }
  longest = std::max(longest, length);
  encodings.push_back(*std::move(encoding));
  return absl::OkStatus();
}

absl::StatusOr<models::NamedTensors> TextInput::Encode(
    absl::Span<const std::string> texts) const {
  if (!available()) return absl::InvalidArgumentError(reason_);
  ABSL_RAW_CHECK(!texts.empty(), "encoding no text");
  text::EncodeOptions options;
  options.max_length = max_length_;
  std::vector<text::Encoding> encodings;
  encodings.reserve(texts.size());
  int64_t longest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    ABSL_RAW_CHECK(static_cast<int64_t>(texts[i].size()) <= kMaxTextBytes,
                   "text above kMaxTextBytes");
    absl::Status added = Add(tokenizer_->Encode(texts[i], options), i,
                             kTextInputName, encodings, longest);
    if (!added.ok()) return added;
  }
  return Pad(encodings, longest);
}

absl::StatusOr<models::NamedTensors> TextInput::EncodePairs(
    absl::Span<const std::string> queries,
    absl::Span<const std::string> documents) const {
  if (!available()) return absl::InvalidArgumentError(reason_);
  ABSL_RAW_CHECK(!queries.empty() && queries.size() == documents.size(),
                 "encoding no pair, or queries and documents of two counts");
  text::EncodeOptions options;
  options.max_length = max_length_;
  std::vector<text::Encoding> encodings;
  encodings.reserve(queries.size());
  int64_t longest = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    ABSL_RAW_CHECK(
        static_cast<int64_t>(queries[i].size()) <= kMaxTextBytes &&
            static_cast<int64_t>(documents[i].size()) <= kMaxTextBytes,
        "text above kMaxTextBytes");
    absl::StatusOr<text::Encoding> encoding =
        tokenizer_->EncodePair(queries[i], documents[i], options);
    if (absl::IsFailedPrecondition(encoding.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs '", kQueryInputName, "' and '",
                       kDocumentInputName, "': ", encoding.status().message()));
    }
    absl::Status added =
        Add(std::move(encoding), i, kDocumentInputName, encodings, longest);
    if (!added.ok()) return added;
  }
  return Pad(encodings, longest);
}

absl::StatusOr<models::NamedTensors> TextInput::Pad(
    const std::vector<text::Encoding>& encodings, int64_t longest) const {
  return models::CatchExceptions([&]() -> absl::StatusOr<models::NamedTensors> {
    const int64_t batch = static_cast<int64_t>(encodings.size());
    at::Tensor ids = at::full({batch, longest}, pad_id_, at::kLong);
    at::Tensor mask = at::zeros({batch, longest}, at::kLong);
    at::Tensor types = at::zeros({batch, longest}, at::kLong);
    for (int64_t r = 0; r < batch; ++r) {
      const text::Encoding& encoding = encodings[r];
      CopyRow(encoding.ids, r, ids);
      mask[r].narrow(0, 0, encoding.ids.size()).fill_(1);
      CopyRow(encoding.type_ids, r, types);
    }
    models::NamedTensors tensors = {{"input_ids", ids}};
    if (attention_mask_) tensors.emplace("attention_mask", mask);
    if (token_type_ids_) tensors.emplace("token_type_ids", types);
    return tensors;
  });
}

}  // namespace castserve
