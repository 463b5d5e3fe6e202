// ChatPrompt: a generation model's chat template (text/jinja), read from its
// folder once at load, turning a request's `messages` into the prompt text
// as transformers' apply_chat_template(messages, add_generation_prompt=True)
// renders it, with the folder's special tokens (bos_token, eos_token, ...).
//
// Immutable after creation; Render is thread-safe.
#ifndef CASTSERVE_SERVER_SERVABLES_GENERATION_CHAT_PROMPT_H_
#define CASTSERVE_SERVER_SERVABLES_GENERATION_CHAT_PROMPT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/file_system.h"
#include "text/jinja/chat_template.h"
#include "text/jinja/value.h"

namespace castserve {

// Bounds on a request's messages (the JSON text of the `messages` input).
inline constexpr size_t kMaxChatMessagesBytes = 4 * 1024 * 1024;
inline constexpr int kMaxChatMessagesDepth = 16;

class ChatPrompt {
 public:
  // The template of `folder` (chat_template.jinja, else tokenizer_config.
  // json's chat_template); null when the folder has none. InvalidArgument
  // naming the file and the construct for a template castserve cannot
  // render (a load error, never a wrong prompt).
  static absl::StatusOr<std::unique_ptr<ChatPrompt>> Load(
      platform::FileSystem* files, const std::string& folder);
  // From a template's source and the special tokens it sees.
  static absl::StatusOr<std::unique_ptr<ChatPrompt>> Create(
      std::string source, text::jinja::Dict special_tokens);

  // The prompt of `messages_json`: a JSON array of message objects (each
  // with "role" and "content"). InvalidArgument naming the input for JSON
  // that is not that, or for what the template refuses (its
  // raise_exception message); ResourceExhausted past a render limit.
  absl::StatusOr<std::string> Render(absl::string_view messages_json) const;

 private:
  ChatPrompt(text::jinja::ChatTemplate chat_template,
             text::jinja::Dict special_tokens)
      : template_(std::move(chat_template)),
        special_tokens_(std::move(special_tokens)) {}

  const text::jinja::ChatTemplate template_;
  const text::jinja::Dict special_tokens_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_GENERATION_CHAT_PROMPT_H_
