// What a chat template is rendered with, built as transformers'
// apply_chat_template builds it: `messages` (None-valued keys dropped,
// reasoning_content/thinking/reasoning aliased as transformers does),
// `tools`, `documents`, `add_generation_prompt`, the tokenizer's named
// special tokens (bos_token, eos_token, unk_token, sep_token, pad_token,
// cls_token, mask_token) and extra template arguments (enable_thinking,
// ...), which override special tokens of the same name. Also: a model
// folder's template and special tokens, and JSON to Value.
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_CHAT_CONTEXT_H_
#define CASTSERVE_TEXT_JINJA_CHAT_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "platform/file_system.h"
#include "text/jinja/limits.h"
#include "text/jinja/value.h"
#include "text/unicode/unicode.h"

namespace castserve::text::jinja {

struct ChatInputs {
  // A list of dicts with at least "role" and "content" (a string or a list
  // of parts such as {"type": "text", "text": ...}).
  Value messages = Value::List({});
  bool add_generation_prompt = false;
  Value tools = Value::None();      // A list of JSON schemas, or None.
  Value documents = Value::None();  // A list of dicts, or None.
  Dict special_tokens;              // bos_token -> "<s>", ...
  Dict extra;                       // Further template arguments.
};

// InvalidArgument when a message is not a dict.
absl::StatusOr<Value> BuildChatContext(const ChatInputs& inputs);

// A model folder's chat template and special tokens.
struct ModelChatTemplate {
  std::string source;
  Dict special_tokens;
};

// Reads `folder`/chat_template.jinja when present, else the chat_template
// of `folder`/tokenizer_config.json (a string, or a list of {name,
// template}: the one named `template_name`, "default" when empty), and
// the named special tokens of tokenizer_config.json (strings or
// AddedToken dicts' "content"), merged with special_tokens_map.json where
// transformers merges it (no added_tokens_decoder). NotFound when the folder
// has no chat template; InvalidArgument for malformed files;
// ResourceExhausted, naming the file, for a template longer than
// `max_template_bytes` (chat_template.jinja is refused before it is read).
absl::StatusOr<ModelChatTemplate> ReadModelChatTemplate(
    platform::FileSystem* files, const std::string& folder,
    const std::string& template_name = "",
    size_t max_template_bytes = Limits{}.max_template_bytes);

// A JSON document as a Value (objects keep their member order when `Json`
// does, e.g. nlohmann::ordered_json). InvalidArgument for an unsigned
// integer beyond int64, nesting deeper than `max_depth`, or a string or
// member name that is not valid UTF-8 (a JSON value built in memory, not
// parsed, may hold any bytes).
template <typename Json>
absl::StatusOr<Value> ValueFromJson(const Json& json, int max_depth = 128) {
  if (max_depth < 0) return absl::InvalidArgumentError("JSON nests too deep");
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("JSON integer ", u, " beyond 64 bits"));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string: {
      std::string text = json.template get<std::string>();
      if (!IsValidUtf8(text)) {
        return absl::InvalidArgumentError(
            absl::StrCat("JSON string is not valid UTF-8: ", Utf8Lossy(text)));
      }
      return Value::String(std::move(text));
    }
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : json) {
        absl::StatusOr<Value> value = ValueFromJson(item, max_depth - 1);
        if (!value.ok()) return value;
        items.push_back(*std::move(value));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (auto it = json.begin(); it != json.end(); ++it) {
        if (!IsValidUtf8(it.key())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "JSON member name is not valid UTF-8: ", Utf8Lossy(it.key())));
        }
        absl::StatusOr<Value> value = ValueFromJson(it.value(), max_depth - 1);
        if (!value.ok()) return value;
        dict.Set(it.key(), *std::move(value));
      }
      return Value::FromDict(std::move(dict));
    }
    default:
      return absl::InvalidArgumentError("unsupported JSON value");
  }
}

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_CHAT_CONTEXT_H_
