// A model's chat template: Jinja source parsed once, rendered per request
// with output equal to Python's jinja2 as transformers' apply_chat_template
// renders it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols; raise_exception, strftime_now, namespace, dict; tojson as
// json.dumps). The subset castserve implements is in text/jinja/README.md;
// a template outside it fails at Create, naming the construct and where.
//
//   absl::StatusOr<ChatTemplate> chat_template =
//       ChatTemplate::Create(source, Limits{});
//   absl::StatusOr<std::string> prompt = chat_template->Render(context);
//
// Thread-safe: Render is const and may run concurrently on one
// ChatTemplate (and its copies, which share the parsed program).
#ifndef CASTSERVE_TEXT_JINJA_CHAT_TEMPLATE_H_
#define CASTSERVE_TEXT_JINJA_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "text/jinja/limits.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {

struct Program;

class ChatTemplate {
 public:
  // Parses `source`. InvalidArgument for a syntax error or a construct
  // castserve does not implement (the message names it and its line and
  // column); ResourceExhausted when the source is longer than
  // limits.max_template_bytes or nests deeper than max_nesting_depth.
  // strftime_now reads `clock` (Python's datetime.now(): the real clock and
  // local time by default; tests pass a fake), which outlives the template.
  static absl::StatusOr<ChatTemplate> Create(
      std::string source, Limits limits = {},
      platform::Clock* clock = &platform::Clock::Real(),
      absl::TimeZone time_zone = absl::LocalTimeZone());

  // Renders with `context`, a dict of the variables the template sees
  // (BuildChatContext in chat_context.h makes it from messages). Errors:
  // InvalidArgument for what jinja2 would raise (an undefined value used,
  // a type error, raise_exception: see RaisedMessage); ResourceExhausted
  // naming the limit a render exceeded.
  absl::StatusOr<std::string> Render(const Value& context) const;

  // The message the template passed to raise_exception, when `status` is
  // a Render error it raised; nullopt for any other status.
  static std::optional<std::string> RaisedMessage(const absl::Status& status);

 private:
  ChatTemplate(std::shared_ptr<const Program> program, Limits limits,
               platform::Clock* clock, absl::TimeZone time_zone);

  std::shared_ptr<const Program> program_;
  Limits limits_;
  platform::Clock* clock_;
  absl::TimeZone time_zone_;
};

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_CHAT_TEMPLATE_H_
