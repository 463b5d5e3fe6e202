#include "server/servables/generation/chat_prompt.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "platform/test_util/fake_file_system.h"

namespace castserve {
namespace {

// A ChatML template as models ship it.
constexpr char kChatMl[] =
    "{{ bos_token }}{% for message in messages %}<|im_start|>"
    "{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}";

TEST(ChatPromptTest, LoadsTheFolderTemplateAndItsSpecialTokens) {
  platform::FakeFileSystem files;
  files.AddFile("/m/chat_template.jinja", kChatMl);
  files.AddFile("/m/tokenizer_config.json", R"({"bos_token": "<s>"})");
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
      ChatPrompt::Load(&files, "/m");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  ASSERT_NE(*prompt, nullptr);
  absl::StatusOr<std::string> text =
      (*prompt)->Render(R"([{"role": "system", "content": "Be brief."},)"
                        R"( {"role": "user", "content": "Hi\nthere"}])");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<s><|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatPromptTest, AFolderWithoutTemplateHasNone) {
  platform::FakeFileSystem files;
  files.AddFile("/m/tokenizer_config.json", R"({"bos_token": "<s>"})");
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
      ChatPrompt::Load(&files, "/m");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, nullptr);
}

TEST(ChatPromptTest, ATemplateThatDoesNotParseFailsTheLoadNamingTheFolder) {
  platform::FakeFileSystem files;
  files.AddFile("/m/chat_template.jinja", "{% for m in messages %}");
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
      ChatPrompt::Load(&files, "/m");
  ASSERT_FALSE(prompt.ok());
  EXPECT_NE(prompt.status().message().find("chat template of /m"),
            std::string::npos)
      << prompt.status();
}

TEST(ChatPromptTest, RefusesMessagesThatAreNotAnArrayOfObjects) {
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
      ChatPrompt::Create(kChatMl, {});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  for (const char* bad : {"{}", "[1]", "[", "[{\"role\": \"user\"}"}) {
    absl::StatusOr<std::string> text = (*prompt)->Render(bad);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(text.status().message().find("messages"), std::string::npos)
        << text.status();
  }
}

TEST(ChatPromptTest, ARaisedExceptionIsTheTemplatesMessage) {
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt = ChatPrompt::Create(
      "{% if messages[0]['role'] != 'user' %}"
      "{{ raise_exception('Conversations start with a user turn') }}"
      "{% endif %}ok",
      {});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  absl::StatusOr<std::string> text =
      (*prompt)->Render(R"([{"role": "assistant", "content": "x"}])");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      text.status().message().find("Conversations start with a user turn"),
      std::string::npos)
      << text.status();
}

}  // namespace
}  // namespace castserve
