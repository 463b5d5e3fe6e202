#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/json_tokenizer.h"
#include "text/sentencepiece_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_json.h"

namespace castserve::text {
namespace {

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error)
    return absl::NotFoundError(
        absl::StrCat(path.string(), ": ", error.message()));
  if (size > kMaxTokenizerJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", size,
                                                   " bytes, more than ",
                                                   kMaxTokenizerJsonBytes));
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  if (!file)
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot read"));
  return std::move(contents).str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& folder) {
  const std::filesystem::path json_path =
      std::filesystem::path(folder) / "tokenizer.json";
  const std::filesystem::path model_path =
      std::filesystem::path(folder) / "tokenizer.model";
  std::error_code error;
  if (std::filesystem::is_regular_file(json_path, error)) {
    absl::StatusOr<std::string> json = ReadFile(json_path);
    if (!json.ok()) return json.status();
    absl::StatusOr<std::unique_ptr<JsonTokenizer>> tokenizer =
        JsonTokenizer::FromJson(*json);
    if (!tokenizer.ok()) {
      return absl::Status(
          tokenizer.status().code(),
          absl::StrCat(json_path.string(), ": ", tokenizer.status().message()));
    }
    return std::unique_ptr<Tokenizer>(*std::move(tokenizer));
  }
  if (std::filesystem::is_regular_file(model_path, error)) {
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
        SentencePieceTokenizer::Create(model_path.string());
    if (!tokenizer.ok()) return tokenizer.status();
    return std::unique_ptr<Tokenizer>(*std::move(tokenizer));
  }
  return absl::NotFoundError(
      absl::StrCat(folder, ": no tokenizer.json or tokenizer.model"));
}

}  // namespace castserve::text
