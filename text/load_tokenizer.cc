#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "platform/file_system.h"
#include "text/pipeline/json_tokenizer.h"
#include "text/pipeline/tokenizer_json.h"
#include "text/sentencepiece/sentencepiece_tokenizer.h"
#include "text/tokenizer.h"

namespace castserve::text {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& folder) {
  platform::FileSystem* const files = platform::FileSystem::Default();
  const std::string json_path = folder + "/tokenizer.json";
  const std::string model_path = folder + "/tokenizer.model";
  if (files->IsRegularFile(json_path)) {
    absl::StatusOr<std::string> json =
        files->ReadFile(json_path, kMaxTokenizerJsonBytes);
    // A file past the limit is one castserve will not take: the header's
    // InvalidArgument, as for any other unusable tokenizer.json.
    if (absl::IsOutOfRange(json.status())) {
      return absl::InvalidArgumentError(json.status().message());
    }
    if (!json.ok()) return json.status();
    absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
        JsonTokenizer::FromJson(*json);
    if (!tokenizer.ok()) {
      return absl::Status(
          tokenizer.status().code(),
          absl::StrCat(json_path, ": ", tokenizer.status().message()));
    }
    return std::unique_ptr<Tokenizer>(*std::move(tokenizer));
  }
  if (files->IsRegularFile(model_path)) {
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
        SentencePieceTokenizer::Create(model_path);
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<Tokenizer>(*std::move(tokenizer));
  }
  return absl::NotFoundError(
      absl::StrCat(folder, ": no tokenizer.json or tokenizer.model"));
}

}  // namespace castserve::text
