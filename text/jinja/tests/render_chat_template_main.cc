// render_chat_template: renders chat templates for checks against jinja2
// (tools/diff_chat_templates.py). Reads JSON lines from stdin, each
// {"template": "...", "context": {...}}, and writes one JSON line per
// input: {"ok": true, "text": "..."} or {"ok": false, "error": "...",
// "code": "INVALID_ARGUMENT", "raised": "..."(raise_exception's text)}.
// strftime_now reads 2026-07-04 15:30:00 UTC, as the references do.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "platform/test_util/fake_clock.h"
#include "text/jinja/chat_context.h"
#include "text/jinja/chat_template.h"

namespace {

using castserve::text::jinja::ChatTemplate;
using castserve::text::jinja::Limits;
using castserve::text::jinja::Value;

nlohmann::ordered_json RenderOne(const std::string& line) {
  nlohmann::ordered_json out;
  nlohmann::ordered_json input =
      nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded() || !input.is_object()) {
    out["ok"] = false;
    out["error"] = "input line is not a JSON object";
    return out;
  }
  // The time tools/diff_chat_templates.py gives jinja2's strftime_now.
  castserve::platform::test_util::FakeClock clock(absl::FromCivil(
      absl::CivilSecond(2026, 7, 4, 15, 30, 0), absl::UTCTimeZone()));
  absl::StatusOr<ChatTemplate> chat_template = ChatTemplate::Create(
      input.value("template", ""), Limits{}, &clock, absl::UTCTimeZone());
  absl::StatusOr<std::string> text = std::string();
  if (!chat_template.ok()) {
    text = chat_template.status();
  } else {
    absl::StatusOr<Value> context = castserve::text::jinja::ValueFromJson(
        input.value("context", nlohmann::ordered_json::object()));
    text = context.ok() ? chat_template->Render(*context)
                        : absl::StatusOr<std::string>(context.status());
  }
  out["ok"] = text.ok();
  if (text.ok()) {
    out["text"] = *text;
    return out;
  }
  out["error"] = std::string(text.status().message());
  out["code"] = absl::StatusCodeToString(text.status().code());
  if (auto raised = ChatTemplate::RaisedMessage(text.status())) {
    out["raised"] = *raised;
  }
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::cout << RenderOne(line).dump(-1, ' ', false,
                                      nlohmann::json::error_handler_t::replace)
              << "\n";
  }
  return 0;
}
