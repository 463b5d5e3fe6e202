#include "text/jinja/chat_template.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/builtins.h"
#include "text/jinja/renderer.h"
#include "text/jinja/syntax/ast.h"
#include "text/jinja/syntax/lexer.h"
#include "text/jinja/syntax/parser.h"

namespace castserve::text::jinja {

ChatTemplate::ChatTemplate(std::shared_ptr<const Program> program,
                           Limits limits, platform::Clock* clock,
                           absl::TimeZone time_zone)
    : program_(std::move(program)),
      limits_(limits),
      clock_(clock),
      time_zone_(time_zone) {}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string source,
                                                  Limits limits,
                                                  platform::Clock* clock,
                                                  absl::TimeZone time_zone) {
  if (source.size() > limits.max_template_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "chat template of ", source.size(),
        " bytes exceeds max_template_bytes (", limits.max_template_bytes, ")"));
  }
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<std::unique_ptr<Program>> program =
      Parse(*tokens, limits.max_nesting_depth);
  if (!program.ok()) return program.status();
  if (clock == nullptr) {
    return absl::InvalidArgumentError("a chat template needs a clock");
  }
  return ChatTemplate(std::shared_ptr<const Program>(*std::move(program)),
                      limits, clock, time_zone);
}

absl::StatusOr<std::string> ChatTemplate::Render(const Value& context) const {
  Renderer renderer(*program_, limits_, clock_, time_zone_);
  return renderer.Render(context);
}

std::optional<std::string> ChatTemplate::RaisedMessage(
    const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument ||
      !absl::StartsWith(status.message(), kRaisedPrefix)) {
    return std::nullopt;
  }
  return std::string(status.message().substr(kRaisedPrefix.size()));
}

}  // namespace castserve::text::jinja
