// libFuzzer target: ChatTemplate over untrusted templates and contexts.
// The input is a template, optionally followed by a NUL byte and a JSON
// document whose members become the render's variables (otherwise a fixed
// conversation with tools and special tokens, as BuildChatContext makes it).
// Checks: Create and Render fail only with the codes their contract names,
// the output stays within max_output_bytes, and a second render of the same
// context gives the same result. Small limits keep every input fast.
// Built by tools/run_fuzzers.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "platform/json_parser.h"
#include "platform/test_util/fake_clock.h"
#include "text/jinja/chat_context.h"
#include "text/jinja/chat_template.h"

namespace {

using castserve::text::jinja::ChatInputs;
using castserve::text::jinja::ChatTemplate;
using castserve::text::jinja::Limits;
using castserve::text::jinja::Value;

void TrapUnless(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    __builtin_trap();
  }
}

bool IsContractError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ||
         status.code() == absl::StatusCode::kResourceExhausted ||
         status.code() == absl::StatusCode::kOutOfRange ||
         status.code() == absl::StatusCode::kUnimplemented;
}

Limits FuzzLimits() {
  Limits limits;
  limits.max_output_bytes = 256 * 1024;
  limits.max_loop_iterations = 20000;
  limits.max_steps = 200000;
  limits.max_nesting_depth = 32;
  limits.max_render_depth = 96;
  limits.max_value_depth = 64;
  return limits;
}

Value DefaultContext() {
  auto json = castserve::platform::ParseJson(R"({"messages": [
      {"role": "system", "content": "Be brief.\n"},
      {"role": "user", "content": "Hello 😀 你好"},
      {"role": "assistant", "content": "<think>x</think>Hi",
       "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
      {"role": "tool", "content": "{\"ok\": true}"},
      {"role": "user", "content": [{"type": "text", "text": "part"}]}],
    "tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]})");
  ChatInputs inputs;
  inputs.messages = *castserve::text::jinja::ValueFromJson((*json)["messages"]);
  inputs.tools = *castserve::text::jinja::ValueFromJson((*json)["tools"]);
  inputs.add_generation_prompt = true;
  inputs.special_tokens.Set("bos_token", Value::String("<s>"));
  inputs.special_tokens.Set("eos_token", Value::String("</s>"));
  return *castserve::text::jinja::BuildChatContext(inputs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Value* const default_context = new Value(DefaultContext());
  static castserve::platform::test_util::FakeClock* const clock =
      new castserve::platform::test_util::FakeClock(
          absl::FromUnixSeconds(1751643000));
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  size_t nul = input.find('\0');
  std::string source(input.substr(0, nul));
  Value context = *default_context;
  if (nul != absl::string_view::npos) {
    absl::StatusOr<nlohmann::json> json =
        castserve::platform::ParseJson(input.substr(nul + 1));
    if (!json.ok() || !json->is_object()) return 0;
    absl::StatusOr<Value> value = castserve::text::jinja::ValueFromJson(*json);
    if (!value.ok()) return 0;
    context = *value;
  }
  const Limits limits = FuzzLimits();
  absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Create(source, limits, clock, absl::UTCTimeZone());
  if (!chat_template.ok()) {
    TrapUnless(IsContractError(chat_template.status()),
               "Create fails with InvalidArgument or ResourceExhausted");
    return 0;
  }
  absl::StatusOr<std::string> first = chat_template->Render(context);
  if (!first.ok()) {
    TrapUnless(IsContractError(first.status()),
               "Render fails with a contract error");
  } else {
    TrapUnless(first->size() <= limits.max_output_bytes,
               "the output stays within max_output_bytes");
  }
  absl::StatusOr<std::string> second = chat_template->Render(context);
  TrapUnless(
      first.ok() == second.ok() &&
          (first.ok() ? *first == *second : first.status() == second.status()),
      "a render is deterministic");
  return 0;
}
