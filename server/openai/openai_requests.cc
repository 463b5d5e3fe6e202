#include "server/openai/openai_requests.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "platform/json_parser.h"

namespace castserve::openai {
namespace {

using nlohmann::json;

constexpr char kParamPayload[] = "castserve.openai/param";

// ---------------------------------------------------------------------------
// Typed reads of one field, errors naming it.

absl::Status WrongType(absl::string_view field, absl::string_view expected,
                       const json& value) {
  return InvalidField(field,
                      absl::StrCat("'", field, "' must be ", expected, ", got ",
                                   platform::JsonTypeName(value)));
}

absl::Status OutOfRange(absl::string_view field, absl::string_view range) {
  return InvalidField(field, absl::StrCat("'", field, "' must be ", range));
}

absl::StatusOr<std::string> ReadString(const json& value,
                                       absl::string_view field,
                                       size_t max_bytes) {
  if (!value.is_string()) return WrongType(field, "a string", value);
  const std::string& text = value.get_ref<const std::string&>();
  if (text.size() > max_bytes) {
    return OutOfRange(field, absl::StrCat("at most ", max_bytes, " bytes"));
  }
  return text;
}

absl::StatusOr<int64_t> ReadInt(const json& value, absl::string_view field,
                                int64_t min, int64_t max) {
  int64_t number = 0;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    number = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(max)) {
      return OutOfRange(field, absl::StrCat("an integer in [", min, ", ", max,
                                            "], got ", value.get<uint64_t>()));
    }
    number = static_cast<int64_t>(value.get<uint64_t>());
  } else {
    return WrongType(field, "an integer", value);
  }
  if (number < min || number > max) {
    return OutOfRange(field, absl::StrCat("an integer in [", min, ", ", max,
                                          "], got ", number));
  }
  return number;
}

absl::StatusOr<double> ReadNumber(const json& value, absl::string_view field,
                                  double min, double max) {
  if (!value.is_number()) return WrongType(field, "a number", value);
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < min || number > max) {
    return OutOfRange(field, absl::StrCat("a number in [", min, ", ", max,
                                          "], got ", number));
  }
  return number;
}

absl::StatusOr<bool> ReadBool(const json& value, absl::string_view field) {
  if (!value.is_boolean()) return WrongType(field, "a boolean", value);
  return value.get<bool>();
}

absl::StatusOr<std::vector<int64_t>> ReadTokens(const json& value,
                                                absl::string_view field) {
  if (value.size() > kMaxInputTokens) {
    return OutOfRange(field,
                      absl::StrCat("at most ", kMaxInputTokens, " token ids"));
  }
  std::vector<int64_t> tokens;
  tokens.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    absl::StatusOr<int64_t> id =
        ReadInt(value[i], absl::StrCat(field, "[", i, "]"), 0, INT64_MAX);
    if (!id.ok()) return id.status();
    tokens.push_back(*id);
  }
  return tokens;
}

bool IsTokenArray(const json& value) {
  return value.is_array() && !value.empty() && value[0].is_number();
}

// A string, an array of strings, an array of token ids or an array of such
// arrays (embeddings' input, completions' prompt).
absl::StatusOr<std::vector<TextOrTokens>> ReadTextsOrTokens(
    const json& value, absl::string_view field, size_t max_items) {
  std::vector<TextOrTokens> items;
  auto add_text = [&](const json& text,
                      const std::string& path) -> absl::Status {
    absl::StatusOr<std::string> read = ReadString(text, path, kMaxInputBytes);
    if (!read.ok()) return read.status();
    items.push_back({false, *std::move(read), {}});
    return absl::OkStatus();
  };
  auto add_tokens = [&](const json& tokens,
                        const std::string& path) -> absl::Status {
    absl::StatusOr<std::vector<int64_t>> read = ReadTokens(tokens, path);
    if (!read.ok()) return read.status();
    if (read->empty()) return OutOfRange(path, "a non-empty array");
    items.push_back({true, "", *std::move(read)});
    return absl::OkStatus();
  };
  if (value.is_string()) {
    if (absl::Status status = add_text(value, std::string(field));
        !status.ok()) {
      return status;
    }
    return items;
  }
  const char* kExpected =
      "a string, an array of strings, an array of token ids or an array of "
      "token id arrays";
  if (!value.is_array()) return WrongType(field, kExpected, value);
  if (value.empty()) return OutOfRange(field, "a non-empty array");
  if (IsTokenArray(value)) {
    if (absl::Status status = add_tokens(value, std::string(field));
        !status.ok()) {
      return status;
    }
    return items;
  }
  if (value.size() > max_items) {
    return OutOfRange(field, absl::StrCat("at most ", max_items, " items"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string path = absl::StrCat(field, "[", i, "]");
    absl::Status status = value[i].is_string()  ? add_text(value[i], path)
                          : value[i].is_array() ? add_tokens(value[i], path)
                                                : WrongType(path,
                                                            "a string or an "
                                                            "array of token "
                                                            "ids",
                                                            value[i]);
    if (!status.ok()) return status;
  }
  return items;
}

// ---------------------------------------------------------------------------
// The body and its fields.

absl::StatusOr<json> ParseBody(absl::string_view body) {
  platform::JsonLimits limits;
  limits.max_bytes = kMaxBodyBytes;
  limits.max_depth = kMaxJsonDepth;
  absl::StatusOr<json> root = platform::ParseJson(body, limits);
  if (!root.ok()) return root.status();
  if (!root->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body must be a JSON object, got ", platform::JsonTypeName(*root)));
  }
  return root;
}

// One field's reader; null values are taken as absent before it runs.
using FieldReader = std::function<absl::Status(const json& value)>;

// Runs the reader of every field present in `root` and refuses missing
// `required` fields by name. A field without a reader is ignored, as OpenAI's
// servers ignore fields they do not know; the API's fields that would change
// an answer castserve cannot give have readers that refuse them
// (RefusedUnless).
absl::Status ReadFields(const json& root,
                        const std::map<std::string, FieldReader>& readers,
                        const std::vector<std::string>& required) {
  for (const std::string& name : required) {
    auto it = root.find(name);
    if (it == root.end() || it->is_null()) {
      return InvalidField(name, absl::StrCat("'", name, "' is required"));
    }
  }
  for (const auto& [key, value] : root.items()) {
    auto reader = readers.find(key);
    if (reader == readers.end() || value.is_null()) continue;
    if (absl::Status status = reader->second(value); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadModel(const json& value, std::string* model) {
  absl::StatusOr<std::string> name =
      ReadString(value, "model", kMaxModelNameBytes);
  if (!name.ok()) return name.status();
  if (name->empty()) return OutOfRange("model", "a model name");
  *model = *std::move(name);
  return absl::OkStatus();
}

// A field castserve cannot honour: only `off` (a predicate) passes.
FieldReader RefusedUnless(const std::string& name,
                          std::function<bool(const json&)> off,
                          absl::string_view why) {
  return [name, off = std::move(off), why = std::string(why)](const json& v) {
    if (off(v)) return absl::OkStatus();
    return InvalidField(name,
                        absl::StrCat("'", name, "' is not supported: ", why));
  };
}

bool IsFalse(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool IsEmptyObject(const json& v) { return v.is_object() && v.empty(); }

absl::Status ReadStop(const json& value, std::vector<std::string>* stop) {
  if (value.is_string()) {
    absl::StatusOr<std::string> one = ReadString(value, "stop", 256);
    if (!one.ok()) return one.status();
    if (!one->empty()) stop->push_back(*std::move(one));
    return absl::OkStatus();
  }
  if (!value.is_array()) {
    return WrongType("stop", "a string or an array of strings", value);
  }
  if (value.size() > kMaxStopStrings) {
    return OutOfRange("stop",
                      absl::StrCat("at most ", kMaxStopStrings, " strings"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    absl::StatusOr<std::string> one =
        ReadString(value[i], absl::StrCat("stop[", i, "]"), 256);
    if (!one.ok()) return one.status();
    if (one->empty()) {
      return OutOfRange(absl::StrCat("stop[", i, "]"), "a non-empty string");
    }
    stop->push_back(*std::move(one));
  }
  return absl::OkStatus();
}

// A message's content: a string, or text parts ({"type": "text", "text"}).
absl::Status CheckContent(const json& content, const std::string& path) {
  if (content.is_string() || content.is_null()) return absl::OkStatus();
  if (!content.is_array()) {
    return WrongType(path, "a string or an array of content parts", content);
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_path = absl::StrCat(path, "[", i, "]");
    const json& part = content[i];
    if (!part.is_object()) return WrongType(part_path, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || *type != "text") {
      return InvalidField(absl::StrCat(part_path, ".type"),
                          absl::StrCat("'", part_path,
                                       ".type' must be \"text\": castserve's "
                                       "models take text only"));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return InvalidField(
          absl::StrCat(part_path, ".text"),
          absl::StrCat("'", part_path, ".text' must be a string"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadMessages(const json& value, std::string* messages_json) {
  if (!value.is_array()) {
    return WrongType("messages", "an array of messages", value);
  }
  if (value.empty() || value.size() > kMaxMessages) {
    return OutOfRange("messages",
                      absl::StrCat("1 to ", kMaxMessages, " messages"));
  }
  static const char* const kRoles[] = {"system", "developer", "user",
                                       "assistant", "tool"};
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string path = absl::StrCat("messages[", i, "]");
    const json& message = value[i];
    if (!message.is_object()) return WrongType(path, "an object", message);
    auto role = message.find("role");
    bool known_role = false;
    if (role != message.end() && role->is_string()) {
      for (const char* name : kRoles) known_role |= *role == name;
    }
    if (!known_role) {
      return InvalidField(absl::StrCat(path, ".role"),
                          absl::StrCat("'", path, ".role' must be one of ",
                                       absl::StrJoin(kRoles, ", ")));
    }
    auto content = message.find("content");
    if (content == message.end()) {
      return InvalidField(absl::StrCat(path, ".content"),
                          absl::StrCat("'", path, ".content' is required"));
    }
    if (absl::Status status =
            CheckContent(*content, absl::StrCat(path, ".content"));
        !status.ok()) {
      return status;
    }
  }
  *messages_json = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return absl::OkStatus();
}

// The fields chat completions and completions share.
std::map<std::string, FieldReader> SamplingReaders(CompletionRequest* out) {
  std::map<std::string, FieldReader> readers;
  readers["model"] = [out](const json& v) { return ReadModel(v, &out->model); };
  readers["temperature"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<double> t = ReadNumber(v, "temperature", 0, 2);
    if (t.ok()) out->temperature = *t;
    return t.status();
  };
  readers["top_p"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<double> p = ReadNumber(v, "top_p", 0, 1);
    if (!p.ok()) return p.status();
    if (*p == 0) return OutOfRange("top_p", "in (0, 1]");
    out->top_p = *p;
    return absl::OkStatus();
  };
  readers["seed"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<int64_t> seed = ReadInt(v, "seed", 0, INT64_MAX);
    if (seed.ok()) out->seed = *seed;
    return seed.status();
  };
  readers["stop"] = [out](const json& v) { return ReadStop(v, &out->stop); };
  readers["n"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<int64_t> n = ReadInt(v, "n", 1, kMaxChoices);
    if (n.ok()) out->n = static_cast<int>(*n);
    return n.status();
  };
  readers["stream"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<bool> stream = ReadBool(v, "stream");
    if (stream.ok()) out->stream = *stream;
    return stream.status();
  };
  readers["stream_options"] = [out](const json& v) -> absl::Status {
    if (!v.is_object()) return WrongType("stream_options", "an object", v);
    // Other options are ignored, as other unknown fields are.
    if (auto option = v.find("include_usage");
        option != v.end() && !option->is_null()) {
      absl::StatusOr<bool> include =
          ReadBool(*option, "stream_options.include_usage");
      if (!include.ok()) return include.status();
      out->include_usage = *include;
    }
    return absl::OkStatus();
  };
  readers["presence_penalty"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<double> penalty =
        ReadNumber(v, "presence_penalty", -kMaxPenalty, kMaxPenalty);
    if (penalty.ok()) out->presence_penalty = *penalty;
    return penalty.status();
  };
  readers["frequency_penalty"] = [out](const json& v) -> absl::Status {
    absl::StatusOr<double> penalty =
        ReadNumber(v, "frequency_penalty", -kMaxPenalty, kMaxPenalty);
    if (penalty.ok()) out->frequency_penalty = *penalty;
    return penalty.status();
  };
  readers["logit_bias"] =
      RefusedUnless("logit_bias", IsEmptyObject, "castserve has no logit bias");
  readers["user"] = [](const json& v) {
    return ReadString(v, "user", kMaxModelNameBytes).status();
  };
  return readers;
}

absl::Status ReadMaxTokens(const json& v, const char* field,
                           CompletionRequest* out) {
  absl::StatusOr<int64_t> max = ReadInt(v, field, 1, kMaxTokensLimit);
  if (max.ok()) out->max_tokens = *max;
  return max.status();
}

}  // namespace

absl::Status InvalidField(absl::string_view param, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

std::optional<std::string> FieldOf(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayload);
  if (!param.has_value()) return std::nullopt;
  return std::string(*param);
}

absl::StatusOr<EmbeddingsRequest> DecodeEmbeddingsRequest(
    absl::string_view body) {
  absl::StatusOr<json> root = ParseBody(body);
  if (!root.ok()) return root.status();
  EmbeddingsRequest out;
  std::map<std::string, FieldReader> readers;
  readers["model"] = [&](const json& v) { return ReadModel(v, &out.model); };
  readers["input"] = [&](const json& v) -> absl::Status {
    absl::StatusOr<std::vector<TextOrTokens>> inputs =
        ReadTextsOrTokens(v, "input", kMaxInputs);
    if (inputs.ok()) out.inputs = *std::move(inputs);
    return inputs.status();
  };
  readers["encoding_format"] = [&](const json& v) -> absl::Status {
    if (v == "float") return absl::OkStatus();
    if (v == "base64") {
      out.base64 = true;
      return absl::OkStatus();
    }
    return InvalidField("encoding_format",
                        "'encoding_format' must be \"float\" or \"base64\"");
  };
  readers["dimensions"] = [&](const json& v) -> absl::Status {
    absl::StatusOr<int64_t> dimensions =
        ReadInt(v, "dimensions", 1, kMaxDimensions);
    if (dimensions.ok()) out.dimensions = *dimensions;
    return dimensions.status();
  };
  readers["user"] = [](const json& v) {
    return ReadString(v, "user", kMaxModelNameBytes).status();
  };
  if (absl::Status status = ReadFields(*root, readers, {"model", "input"});
      !status.ok()) {
    return status;
  }
  return out;
}

absl::StatusOr<CompletionRequest> DecodeCompletionRequest(
    absl::string_view body, bool chat) {
  absl::StatusOr<json> root = ParseBody(body);
  if (!root.ok()) return root.status();
  CompletionRequest out;
  out.chat = chat;
  std::map<std::string, FieldReader> readers = SamplingReaders(&out);
  readers["max_tokens"] = [&](const json& v) {
    return ReadMaxTokens(v, "max_tokens", &out);
  };
  if (chat) {
    readers["messages"] = [&](const json& v) {
      return ReadMessages(v, &out.messages_json);
    };
    readers["max_completion_tokens"] = [&](const json& v) {
      return ReadMaxTokens(v, "max_completion_tokens", &out);
    };
    readers["logprobs"] = [&](const json& v) -> absl::Status {
      absl::StatusOr<bool> logprobs = ReadBool(v, "logprobs");
      if (logprobs.ok()) out.logprobs = *logprobs;
      return logprobs.status();
    };
    readers["top_logprobs"] = [&](const json& v) -> absl::Status {
      absl::StatusOr<int64_t> top =
          ReadInt(v, "top_logprobs", 0, kMaxTopLogprobs);
      if (top.ok()) out.top_logprobs = static_cast<int>(*top);
      return top.status();
    };
    const auto empty_array = [](const json& v) {
      return v.is_array() && v.empty();
    };
    const auto none = [](const json& v) { return v == "none"; };
    readers["tools"] =
        RefusedUnless("tools", empty_array, "castserve does not call tools");
    readers["tool_choice"] =
        RefusedUnless("tool_choice", none, "castserve does not call tools");
    readers["functions"] = RefusedUnless("functions", empty_array,
                                         "castserve does not call functions");
    readers["function_call"] = RefusedUnless(
        "function_call", none, "castserve does not call functions");
    readers["modalities"] = RefusedUnless(
        "modalities", [](const json& v) { return v == json::array({"text"}); },
        "castserve answers text only");
    readers["audio"] = RefusedUnless(
        "audio", [](const json&) { return false; },
        "castserve answers text only");
    readers["prediction"] = RefusedUnless(
        "prediction", [](const json&) { return false; },
        "castserve has no predicted outputs");
    readers["response_format"] = [](const json& v) -> absl::Status {
      if (v.is_object() && v.size() == 1 && v.contains("type") &&
          v["type"] == "text") {
        return absl::OkStatus();
      }
      return InvalidField("response_format",
                          "'response_format' must be {\"type\": \"text\"}: "
                          "castserve has no structured output");
    };
  } else {
    readers["prompt"] = [&](const json& v) -> absl::Status {
      absl::StatusOr<std::vector<TextOrTokens>> prompts =
          ReadTextsOrTokens(v, "prompt", kMaxPrompts);
      if (prompts.ok()) out.prompts = *std::move(prompts);
      return prompts.status();
    };
    // Completions' logprobs is the count of top alternatives: present (0
    // included) asks for the chosen tokens' log-probabilities.
    readers["logprobs"] = [&](const json& v) -> absl::Status {
      absl::StatusOr<int64_t> top = ReadInt(v, "logprobs", 0, kMaxTopLogprobs);
      if (!top.ok()) return top.status();
      out.logprobs = true;
      out.top_logprobs = static_cast<int>(*top);
      return absl::OkStatus();
    };
    readers["messages"] = RefusedUnless(
        "messages", [](const json&) { return false; },
        "messages belong to /v1/chat/completions");
    readers["echo"] =
        RefusedUnless("echo", IsFalse, "castserve does not echo the prompt");
    readers["suffix"] = RefusedUnless(
        "suffix", [](const json& v) { return v == ""; },
        "castserve does not insert text");
    readers["best_of"] = RefusedUnless(
        "best_of", [](const json& v) { return v == 1; },
        "castserve answers every sequence it runs (1 only)");
  }
  if (absl::Status status =
          ReadFields(*root, readers, {"model", chat ? "messages" : "prompt"});
      !status.ok()) {
    return status;
  }
  if (chat && out.top_logprobs > 0 && !out.logprobs) {
    return InvalidField("top_logprobs",
                        "'top_logprobs' needs 'logprobs' set to true");
  }
  if (out.include_usage && !out.stream) {
    return InvalidField("stream_options",
                        "'stream_options' is only allowed with stream: true");
  }
  const size_t sequences = std::max<size_t>(out.prompts.size(), 1) * out.n;
  if (sequences > kMaxChoices) {
    return InvalidField("n", absl::StrCat("prompts x n must be at most ",
                                          kMaxChoices, ", got ", sequences));
  }
  return out;
}

absl::StatusOr<RerankRequest> DecodeRerankRequest(absl::string_view body) {
  absl::StatusOr<json> root = ParseBody(body);
  if (!root.ok()) return root.status();
  RerankRequest out;
  std::map<std::string, FieldReader> readers;
  readers["model"] = [&](const json& v) { return ReadModel(v, &out.model); };
  readers["query"] = [&](const json& v) -> absl::Status {
    absl::StatusOr<std::string> query = ReadString(v, "query", kMaxInputBytes);
    if (query.ok()) out.query = *std::move(query);
    return query.status();
  };
  readers["documents"] = [&](const json& v) -> absl::Status {
    if (!v.is_array()) return WrongType("documents", "an array of strings", v);
    if (v.empty() || v.size() > kMaxInputs) {
      return OutOfRange("documents",
                        absl::StrCat("1 to ", kMaxInputs, " strings"));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      absl::StatusOr<std::string> document =
          ReadString(v[i], absl::StrCat("documents[", i, "]"), kMaxInputBytes);
      if (!document.ok()) return document.status();
      out.documents.push_back(*std::move(document));
    }
    return absl::OkStatus();
  };
  readers["top_n"] = [&](const json& v) -> absl::Status {
    absl::StatusOr<int64_t> top_n = ReadInt(v, "top_n", 1, kMaxInputs);
    if (top_n.ok()) out.top_n = *top_n;
    return top_n.status();
  };
  readers["return_documents"] = [&](const json& v) -> absl::Status {
    absl::StatusOr<bool> r = ReadBool(v, "return_documents");
    if (r.ok()) out.return_documents = *r;
    return r.status();
  };
  readers["user"] = [](const json& v) {
    return ReadString(v, "user", kMaxModelNameBytes).status();
  };
  if (absl::Status status =
          ReadFields(*root, readers, {"model", "query", "documents"});
      !status.ok()) {
    return status;
  }
  return out;
}

}  // namespace castserve::openai
