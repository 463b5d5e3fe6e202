#include "text/jinja/chat_context.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "platform/json_parser.h"

namespace castserve::text::jinja {
namespace {

constexpr uint64_t kMaxConfigBytes = 64 * 1024 * 1024;
constexpr const char* kSpecialTokenNames[] = {
    "bos_token", "eos_token", "unk_token", "sep_token",
    "pad_token", "cls_token", "mask_token"};
// The names transformers reads a message's reasoning under, the first
// being the one chat templates read.
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking",
                                            "reasoning"};

absl::StatusOr<Value> NormalizeMessage(const Value& message, size_t index) {
  if (!message.is_dict()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chat message ", index, " should be a dict, got ", TypeName(message)));
  }
  Dict kept;
  for (const auto& [key, value] : message.dict().items()) {
    if (!value.is_none()) kept.Set(key, value);
  }
  const Value* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    if ((reasoning = kept.Find(field)) != nullptr) break;
  }
  if (reasoning == nullptr) return Value::FromDict(std::move(kept));
  Value text = *reasoning;
  Dict aliased;
  aliased.Set("thinking", text);
  for (const auto& [key, value] : kept.items()) aliased.Set(key, value);
  aliased.Set("reasoning_content", text);
  return Value::FromDict(std::move(aliased));
}

// A special token as tokenizer_config.json writes it: a string, an
// AddedToken dict ({"content": ...}) or null (absent).
absl::Status ReadSpecialTokens(const nlohmann::json& config,
                               const std::string& path, Dict* tokens) {
  for (const char* name : kSpecialTokenNames) {
    auto it = config.find(name);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_string()) {
      tokens->Set(name, Value::String(it->get<std::string>()));
    } else if (it->is_object() && it->contains("content") &&
               (*it)["content"].is_string()) {
      tokens->Set(name, Value::String((*it)["content"].get<std::string>()));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": \"", name, "\" must be a string or an AddedToken dict, got ",
          platform::JsonTypeName(*it)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TemplateFromConfig(const nlohmann::json& config,
                                               const std::string& path,
                                               const std::string& name) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return absl::NotFoundError(absl::StrCat(path, ": no chat_template"));
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": \"chat_template\" must be a string or a list, got ",
        platform::JsonTypeName(*it)));
  }
  std::string wanted = name.empty() ? "default" : name;
  for (const nlohmann::json& entry : *it) {
    if (entry.is_object() && entry.value("name", "") == wanted &&
        entry.contains("template") && entry["template"].is_string()) {
      return entry["template"].get<std::string>();
    }
  }
  return absl::NotFoundError(
      absl::StrCat(path, ": no chat template named \"", wanted, "\""));
}

absl::StatusOr<nlohmann::json> ReadJson(platform::FileSystem* files,
                                        const std::string& path) {
  absl::StatusOr<std::string> text = files->ReadFile(path, kMaxConfigBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<nlohmann::json> json = platform::ParseJson(*text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", json.status().message()));
  }
  if (!json->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an object"));
  }
  return json;
}

absl::Status TemplateTooLong(const std::string& path, uint64_t bytes,
                             size_t max_template_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      path, ": a chat template of ", bytes, " bytes, over max_template_bytes (",
      max_template_bytes, ")"));
}

}  // namespace

absl::StatusOr<Value> BuildChatContext(const ChatInputs& inputs) {
  if (!inputs.messages.is_list()) {
    return absl::InvalidArgumentError("chat messages must be a list");
  }
  std::vector<Value> messages;
  for (size_t i = 0; i < inputs.messages.list().size(); ++i) {
    absl::StatusOr<Value> message =
        NormalizeMessage(inputs.messages.list()[i], i);
    if (!message.ok()) return message;
    messages.push_back(*std::move(message));
  }
  Dict context;
  context.Set("messages", Value::List(std::move(messages)));
  context.Set("tools", inputs.tools);
  context.Set("documents", inputs.documents);
  context.Set("add_generation_prompt",
              Value::Bool(inputs.add_generation_prompt));
  for (const auto& [key, value] : inputs.special_tokens.items()) {
    context.Set(key, value);
  }
  for (const auto& [key, value] : inputs.extra.items()) {
    context.Set(key, value);
  }
  return Value::FromDict(std::move(context));
}

absl::StatusOr<ModelChatTemplate> ReadModelChatTemplate(
    platform::FileSystem* files, const std::string& folder,
    const std::string& template_name, size_t max_template_bytes) {
  ModelChatTemplate result;
  std::string config_path = folder + "/tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (files->IsRegularFile(config_path)) {
    absl::StatusOr<nlohmann::json> json = ReadJson(files, config_path);
    if (!json.ok()) return json.status();
    config = *std::move(json);
  }
  std::string map_path = folder + "/special_tokens_map.json";
  if (!config.contains("added_tokens_decoder") &&
      files->IsRegularFile(map_path)) {
    absl::StatusOr<nlohmann::json> map = ReadJson(files, map_path);
    if (!map.ok()) return map.status();
    for (auto it = map->begin(); it != map->end(); ++it) {
      config[it.key()] = it.value();
    }
  }
  absl::Status status =
      ReadSpecialTokens(config, config_path, &result.special_tokens);
  if (!status.ok()) return status;
  std::string jinja_path = folder + "/chat_template.jinja";
  if (template_name.empty() && files->IsRegularFile(jinja_path)) {
    absl::StatusOr<platform::FileSystem::FileInfo> info =
        files->Stat(jinja_path);
    if (!info.ok()) return info.status();
    if (info->size_bytes > max_template_bytes) {
      return TemplateTooLong(jinja_path, info->size_bytes, max_template_bytes);
    }
    absl::StatusOr<std::string> source =
        files->ReadFile(jinja_path, max_template_bytes);
    if (!source.ok()) return source.status();
    result.source = *std::move(source);
    return result;
  }
  absl::StatusOr<std::string> source =
      TemplateFromConfig(config, config_path, template_name);
  if (!source.ok()) return source.status();
  if (source->size() > max_template_bytes) {
    return TemplateTooLong(config_path, source->size(), max_template_bytes);
  }
  result.source = *std::move(source);
  return result;
}

}  // namespace castserve::text::jinja
