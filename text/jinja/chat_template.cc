#include "text/jinja/chat_template.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/ast.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"
#include "text/jinja/renderer.h"

namespace castserve::text::jinja {

ChatTemplate::ChatTemplate(std::shared_ptr<const Program> program,
                           Limits limits, TemplateClock clock)
    : program_(std::move(program)), limits_(limits), clock_(std::move(clock)) {}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string source,
                                                  Limits limits,
                                                  TemplateClock clock) {
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
  if (!clock.now) {
    return absl::InvalidArgumentError("the template clock has no now()");
  }
  return ChatTemplate(std::shared_ptr<const Program>(*std::move(program)),
                      limits, std::move(clock));
}

absl::StatusOr<std::string> ChatTemplate::Render(const Value& context) const {
  Renderer renderer(*program_, limits_, clock_.now, clock_.time_zone);
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
