// TextInput: a served model's `text` input. A request sends one UTF-8
// string per batch element (wire datatype BYTES, shape [batch, 1] as the
// signature shows it, or [batch]) instead of the token inputs; the model
// folder's tokenizer (text::LoadTokenizer) turns them into input_ids and,
// where the model takes them, attention_mask and token_type_ids:
//
//   - each string is encoded with the tokenizer's special tokens, truncated
//     at the end to max_length tokens (the model's max_sequence_length: a
//     sentence-transformers max_seq_length, else the position table);
//   - the batch is padded on the right to its longest sequence with the
//     tokenizer's pad id (0 when it names none), attention_mask 0 and
//     token type 0 at the padding.
//
// A request carries either `text` or the token inputs, never both
// (tensor_conversion.h decides). The tensors it makes are checked by the
// model like any other (models::Model::CheckLimits).
//
// Immutable after creation; thread-safe.
#ifndef CASTSERVE_SERVER_SERVABLES_TEXT_INPUT_H_
#define CASTSERVE_SERVER_SERVABLES_TEXT_INPUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/model.h"
#include "server/lifecycle/served_model.h"
#include "text/tokenizer.h"

namespace castserve {

// The input's name in requests, metadata and config.pbtxt.
inline constexpr char kTextInputName[] = "text";

// A cross-encoder's inputs (a model with a `scores` output and a tokenizer
// with a pair template): one query and one document per batch element,
// encoded together as the tokenizer's pair template lays them out.
inline constexpr char kQueryInputName[] = "query";
inline constexpr char kDocumentInputName[] = "document";

// The most bytes of one string: a bound on the tokenizer's work per element
// (a sentence-transformers model reads a few hundred tokens of it).
inline constexpr int64_t kMaxTextBytes = int64_t{1} << 20;

class TextInput {
 public:
  // The token inputs of `model_inputs` that text fills, from `tokenizer`,
  // truncating at `max_length` tokens (0: no limit). InvalidArgument when
  // the model takes no INT64 input_ids [batch, seq]. With `pairs` (a
  // cross-encoder) it also takes `query` and `document` (EncodePairs).
  static absl::StatusOr<std::unique_ptr<TextInput>> Create(
      std::shared_ptr<const text::Tokenizer> tokenizer,
      const std::vector<models::TensorSpec>& model_inputs, int64_t max_length,
      bool pairs = false);

  // For a model whose folder has no usable tokenizer: every request with
  // text fails with InvalidArgument `reason` ("... has no tokenizer").
  static std::unique_ptr<TextInput> Unavailable(std::string reason);

  // False for Unavailable ones.
  bool available() const { return tokenizer_ != nullptr; }
  // Why text is refused; empty when available.
  const std::string& unavailable_reason() const { return reason_; }
  int64_t max_length() const { return max_length_; }
  // True when requests may send `query` and `document`.
  bool pairs() const { return available() && pairs_; }

  // The wire signature entry: "text", BYTES, [-1, 1], optional.
  static TensorSpec WireSpec();
  // The wire entries of `query` and `document`: BYTES, [-1, 1], optional.
  static std::vector<TensorSpec> PairWireSpecs();

  // The token tensors for `texts` (one per batch element, at least one,
  // each at most kMaxTextBytes: asserted; the request edge checks both):
  // input_ids and the other token inputs the model takes, int64 [batch,
  // longest]. InvalidArgument naming the element for text that is not valid
  // UTF-8 or that encodes to no token; the reason when unavailable.
  absl::StatusOr<models::NamedTensors> Encode(
      absl::Span<const std::string> texts) const;
  // The token tensors of the pairs (queries[i], documents[i]) (as many of
  // each, at least one, each at most kMaxTextBytes: asserted), truncated
  // longest_first to max_length, padded as Encode pads. InvalidArgument
  // naming the input and element for bad text, or when the tokenizer has no
  // pair template; the reason when unavailable.
  absl::StatusOr<models::NamedTensors> EncodePairs(
      absl::Span<const std::string> queries,
      absl::Span<const std::string> documents) const;

 private:
  TextInput(std::shared_ptr<const text::Tokenizer> tokenizer,
            int64_t max_length, bool attention_mask, bool token_type_ids,
            bool pairs, std::string reason);
  // The encodings padded into the token tensors the model takes.
  absl::StatusOr<models::NamedTensors> Pad(
      const std::vector<text::Encoding>& encodings, int64_t longest) const;
  // Checks encoding `i` of `input` and appends it; `longest` grows.
  absl::Status Add(absl::StatusOr<text::Encoding> encoding, size_t i,
                   const char* input, std::vector<text::Encoding>& encodings,
                   int64_t& longest) const;

  // Null when unavailable.
  const std::shared_ptr<const text::Tokenizer> tokenizer_;
  const int64_t max_length_;
  const int64_t pad_id_;
  // Which optional token inputs the model takes.
  const bool attention_mask_;
  const bool token_type_ids_;
  const bool pairs_;
  const std::string reason_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_TEXT_INPUT_H_
