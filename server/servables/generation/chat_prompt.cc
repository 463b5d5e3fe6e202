#include "server/servables/generation/chat_prompt.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"
#include "text/jinja/chat_context.h"

namespace castserve {
namespace {

constexpr char kMessages[] = "input 'messages'";

}  // namespace

absl::StatusOr<std::unique_ptr<ChatPrompt>> ChatPrompt::Load(
    platform::FileSystem* files, const std::string& folder) {
  absl::StatusOr<text::jinja::ModelChatTemplate> read =
      text::jinja::ReadModelChatTemplate(files, folder);
  if (absl::IsNotFound(read.status())) return std::unique_ptr<ChatPrompt>();
  if (!read.ok()) return read.status();
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
      Create(std::move(read->source), std::move(read->special_tokens));
  if (!prompt.ok()) {
    return absl::Status(prompt.status().code(),
                        absl::StrCat("the chat template of ", folder, ": ",
                                     prompt.status().message()));
  }
  return prompt;
}

absl::StatusOr<std::unique_ptr<ChatPrompt>> ChatPrompt::Create(
    std::string source, text::jinja::Dict special_tokens) {
  absl::StatusOr<text::jinja::ChatTemplate> parsed =
      text::jinja::ChatTemplate::Create(std::move(source));
  if (!parsed.ok()) return parsed.status();
  return std::unique_ptr<ChatPrompt>(
      new ChatPrompt(*std::move(parsed), std::move(special_tokens)));
}

absl::StatusOr<std::string> ChatPrompt::Render(
    absl::string_view messages_json) const {
  platform::JsonLimits limits;
  limits.max_bytes = kMaxChatMessagesBytes;
  limits.max_depth = kMaxChatMessagesDepth;
  // Checked (size, depth, duplicate keys) by the project's parser, then read
  // again keeping the members' order, which a template's tojson shows.
  absl::StatusOr<nlohmann::json> checked =
      platform::ParseJson(messages_json, limits);
  if (!checked.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kMessages, ": ", checked.status().message()));
  }
  if (!checked->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kMessages, " must be a JSON array of messages, got ",
                     platform::JsonTypeName(*checked)));
  }
  for (const nlohmann::json& message : *checked) {
    if (!message.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kMessages, ": every message must be an object, got ",
                       platform::JsonTypeName(message)));
    }
  }
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(
      messages_json.begin(), messages_json.end(), nullptr,
      /*allow_exceptions=*/false);
  absl::StatusOr<text::jinja::Value> messages =
      text::jinja::ValueFromJson(ordered, kMaxChatMessagesDepth);
  if (!messages.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kMessages, ": ", messages.status().message()));
  }
  text::jinja::ChatInputs inputs;
  inputs.messages = *std::move(messages);
  inputs.add_generation_prompt = true;
  inputs.special_tokens = special_tokens_;
  absl::StatusOr<text::jinja::Value> context =
      text::jinja::BuildChatContext(inputs);
  if (!context.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kMessages, ": ", context.status().message()));
  }
  absl::StatusOr<std::string> rendered = template_.Render(*context);
  if (rendered.ok()) return rendered;
  if (std::optional<std::string> raised =
          text::jinja::ChatTemplate::RaisedMessage(rendered.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chat template refused the messages: ", *raised));
  }
  return absl::Status(
      rendered.status().code(),
      absl::StrCat("the chat template: ", rendered.status().message()));
}

}  // namespace castserve
