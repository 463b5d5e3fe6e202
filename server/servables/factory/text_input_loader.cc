#include "server/servables/factory/text_input_loader.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/log.h"
#include "text/tokenizer.h"

namespace castserve {
namespace {

// The text input of `model`, loaded from `folder`: the folder's tokenizer,
// truncating at model.max_sequence_length() (no limit without one). NotFound
// when the folder has no tokenizer; the tokenizer's error when it does not
// load; InvalidArgument when the model takes no token ids.
absl::StatusOr<std::unique_ptr<TextInput>> LoadTextInput(
    const std::string& folder, const models::Model& model) {
  // A tokenizer library that throws fails the text input, not the load.
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer =
      models::CatchExceptions([&] { return text::LoadTokenizer(folder); });
  if (absl::IsNotFound(tokenizer.status())) {
    return absl::NotFoundError(
        absl::StrCat("the model folder ", folder,
                     " has no tokenizer (tokenizer.json or tokenizer.model)"));
  }
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("the tokenizer of ", folder,
                     " does not load: ", tokenizer.status().message()));
  }
  // A cross-encoder (models/encoders/encoder_model.h) takes text pairs.
  const bool scores = std::any_of(
      model.outputs().begin(), model.outputs().end(),
      [](const models::TensorSpec& spec) { return spec.name == "scores"; });
  return TextInput::Create(
      std::shared_ptr<const text::Tokenizer>(*std::move(tokenizer)),
      model.inputs(), model.max_sequence_length().value_or(0), scores);
}

}  // namespace

// The text input of `model` (loaded from `folder`), or an unavailable one
// that says why: a model serves its token inputs whatever its tokenizer.
// A tokenizer that is there but does not load is logged.
std::shared_ptr<const TextInput> TextInputFor(const std::string& folder,
                                              const models::Model& model,
                                              const std::string& model_name) {
  absl::StatusOr<std::unique_ptr<TextInput>> text =
      LoadTextInput(folder, model);
  if (text.ok()) return *std::move(text);
  if (!absl::IsNotFound(text.status())) {
    Log(LogLevel::kWarning, "model serves no text input",
        {{"model", model_name}, {"error", text.status().message()}});
  }
  return TextInput::Unavailable(
      absl::StrCat("input '", kTextInputName, "': ", text.status().message()));
}

}  // namespace castserve
