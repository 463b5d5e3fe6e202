// BuildChatContext as apply_chat_template builds the render's variables,
// and a model folder's template and special tokens.
#include "text/jinja/chat_context.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"
#include "text/jinja/chat_template.h"

namespace castserve::text::jinja {
namespace {

using ::testing::HasSubstr;

Value Json(const std::string& text) {
  absl::StatusOr<Value> value =
      ValueFromJson(nlohmann::ordered_json::parse(text));
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : Value();
}

std::string Render(const std::string& source, const ChatInputs& inputs) {
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(source);
  EXPECT_TRUE(chat_template.ok()) << chat_template.status();
  absl::StatusOr<Value> context = BuildChatContext(inputs);
  EXPECT_TRUE(context.ok()) << context.status();
  absl::StatusOr<std::string> out = chat_template->Render(*context);
  return out.ok() ? *out : out.status().ToString();
}

TEST(ChatContextTest, MessagesAreNormalizedAsTransformersDoes) {
  ChatInputs inputs;
  inputs.messages = Json(
      R"([{"role": "user", "content": "hi", "name": null},
          {"role": "assistant", "content": "yo", "reasoning": "why"}])");
  inputs.add_generation_prompt = true;
  inputs.special_tokens.Set("bos_token", Value::String("<s>"));
  inputs.extra.Set("enable_thinking", Value::Bool(false));
  EXPECT_EQ(Render("{{ bos_token }}{% for m in messages %}{{ m }};{% endfor %}"
                   "{{ add_generation_prompt }} {{ tools }} {{ documents }} "
                   "{{ enable_thinking }}",
                   inputs),
            "<s>{'role': 'user', 'content': 'hi'};{'thinking': 'why', "
            "'role': 'assistant', 'content': 'yo', 'reasoning': 'why', "
            "'reasoning_content': 'why'};True None None False");
}

TEST(ChatContextTest, ExtraArgumentsOverrideSpecialTokens) {
  ChatInputs inputs;
  inputs.special_tokens.Set("eos_token", Value::String("</s>"));
  inputs.extra.Set("eos_token", Value::String("<end>"));
  EXPECT_EQ(Render("{{ eos_token }}", inputs), "<end>");
}

TEST(ChatContextTest, RefusesMessagesThatAreNotDicts) {
  ChatInputs inputs;
  inputs.messages = Json(R"(["just text"])");
  EXPECT_THAT(BuildChatContext(inputs).status().message(),
              HasSubstr("chat message 0 should be a dict, got str"));
}

TEST(ChatContextTest, ReadsTemplateAndTokensOfAModelFolder) {
  platform::FakeFileSystem files;
  files.AddFile("/m/tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<|begin|>",
                  "lstrip": false},
    "eos_token": "<|end|>",
    "pad_token": null,
    "added_tokens_decoder": {},
    "chat_template": "{{ bos_token }}{{ messages | length }}{{ eos_token }}"
  })");
  absl::StatusOr<ModelChatTemplate> model = ReadModelChatTemplate(&files, "/m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->source,
            "{{ bos_token }}{{ messages | length }}{{ eos_token }}");
  ChatInputs inputs;
  inputs.special_tokens = model->special_tokens;
  EXPECT_EQ(Render(model->source, inputs), "<|begin|>0<|end|>");
  EXPECT_EQ(model->special_tokens.Find("pad_token"), nullptr);

  // chat_template.jinja wins over tokenizer_config.json, as in transformers.
  files.AddFile("/m/chat_template.jinja", "from the file\n");
  model = ReadModelChatTemplate(&files, "/m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->source, "from the file\n");
}

TEST(ChatContextTest, PicksANamedTemplateAndMergesTheLegacyTokenMap) {
  platform::FakeFileSystem files;
  files.AddFile("/m/tokenizer_config.json", R"({
    "eos_token": "</s>",
    "chat_template": [{"name": "default", "template": "D"},
                      {"name": "tool_use", "template": "T"}]
  })");
  files.AddFile("/m/special_tokens_map.json",
                R"({"eos_token": {"content": "<eos>"}, "unk_token": "<unk>"})");
  absl::StatusOr<ModelChatTemplate> model = ReadModelChatTemplate(&files, "/m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->source, "D");
  EXPECT_EQ(model->special_tokens.Find("eos_token")->string_value(), "<eos>");
  EXPECT_EQ(model->special_tokens.Find("unk_token")->string_value(), "<unk>");
  EXPECT_EQ(ReadModelChatTemplate(&files, "/m", "tool_use")->source, "T");
  EXPECT_EQ(ReadModelChatTemplate(&files, "/m", "rag").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatContextTest, RefusesMalformedConfigs) {
  platform::FakeFileSystem files;
  files.AddFile("/a/tokenizer_config.json", R"({"bos_token": 3})");
  EXPECT_THAT(ReadModelChatTemplate(&files, "/a").status().message(),
              HasSubstr("\"bos_token\" must be a string or an AddedToken"));
  files.AddFile("/b/tokenizer_config.json", R"({"eos_token": "x"})");
  EXPECT_EQ(ReadModelChatTemplate(&files, "/b").status().code(),
            absl::StatusCode::kNotFound);
  files.AddFile("/c/tokenizer_config.json", "{not json");
  EXPECT_EQ(ReadModelChatTemplate(&files, "/c").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The template is bounded by max_template_bytes, not by the configs' much
// larger bound: a chat_template.jinja past it is refused before it is read.
TEST(ChatContextTest, RefusesATemplateLongerThanTheLimitNamingTheFile) {
  platform::FakeFileSystem files;
  std::string long_template(Limits{}.max_template_bytes + 1, 'x');
  files.AddFile("/j/chat_template.jinja", long_template);
  absl::StatusOr<ModelChatTemplate> model = ReadModelChatTemplate(&files, "/j");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(model.status().message(),
              HasSubstr("/j/chat_template.jinja: a chat template of 262145 "
                        "bytes, over max_template_bytes (262144)"));
  files.AddFile("/t/tokenizer_config.json",
                R"({"chat_template": "0123456789"})");
  model = ReadModelChatTemplate(&files, "/t", "", /*max_template_bytes=*/8);
  EXPECT_THAT(model.status().message(),
              HasSubstr("/t/tokenizer_config.json: a chat template of 10 "
                        "bytes, over max_template_bytes (8)"));
  EXPECT_EQ(ReadModelChatTemplate(&files, "/t", "", 10)->source, "0123456789");
}

// Messages come from requests: a JSON value built in memory may hold any
// bytes, and a template must only ever see UTF-8.
TEST(ChatContextTest, ValueFromJsonRefusesInvalidUtf8) {
  nlohmann::json bad_string = {{"role", "user"}, {"content", "caf\xe9"}};
  absl::StatusOr<Value> value = ValueFromJson(bad_string);
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(value.status().message(),
              HasSubstr("JSON string is not valid UTF-8"));
  nlohmann::json bad_name = {{"\xff", 1}};
  EXPECT_THAT(ValueFromJson(bad_name).status().message(),
              HasSubstr("JSON member name is not valid UTF-8"));
  nlohmann::json good = {{"content", "caf\xc3\xa9"}};
  EXPECT_TRUE(ValueFromJson(good).ok());
}

}  // namespace
}  // namespace castserve::text::jinja
