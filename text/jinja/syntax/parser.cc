#include "text/jinja/syntax/parser.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/syntax/parser_internal.h"

namespace castserve::text::jinja {
namespace parser_internal {

absl::Status Parser::ExpectOp(absl::string_view op) {
  if (!IsOp(op)) {
    return Error(Peek(), absl::StrCat("expected '", op, "'"));
  }
  Next();
  return absl::OkStatus();
}

absl::Status Parser::ExpectBlockEnd() {
  if (Peek().kind != Kind::kBlockEnd) {
    return Error(Peek(), absl::StrCat("expected end of statement, got '",
                                      Peek().value, "'"));
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::ExpectName() {
  if (Peek().kind != Kind::kName) return Error(Peek(), "expected a name");
  return Next().value;
}

absl::Status Parser::Enter(const Token& at) {
  if (++depth_ > max_depth_) return TooDeep(at.line, at.column);
  return absl::OkStatus();
}

absl::Status Parser::Deepen(Expr* node) const {
  int deepest = 0;
  for (const ExprPtr& item : node->items) {
    if (item != nullptr) deepest = std::max(deepest, item->depth);
  }
  node->depth = 1 + deepest;
  if (node->depth > max_depth_) return TooDeep(node->line, node->column);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Program>> Parser::Run() {
  auto program = std::make_unique<Program>();
  std::string stopped_at;
  absl::Status status = ParseBody({}, &program->body, &stopped_at);
  if (!status.ok()) return status;
  return program;
}

absl::Status Parser::ParseBody(const absl::flat_hash_set<std::string>& stop,
                               Body* body, std::string* stopped_at) {
  while (true) {
    const Token& token = Peek();
    if (token.kind == Kind::kEnd) {
      *stopped_at = "";
      return absl::OkStatus();
    }
    if (token.kind == Kind::kData) {
      auto stmt = std::make_unique<Stmt>();
      stmt->kind = Stmt::Kind::kData;
      stmt->text = Next().value;
      body->push_back(std::move(stmt));
      continue;
    }
    if (token.kind == Kind::kVariableBegin) {
      Next();
      auto stmt = std::make_unique<Stmt>();
      stmt->kind = Stmt::Kind::kOutput;
      stmt->line = token.line;
      stmt->column = token.column;
      absl::StatusOr<ExprPtr> expr = ParseTuple(true);
      if (!expr.ok()) return expr.status();
      stmt->expr = *std::move(expr);
      if (Peek().kind != Kind::kVariableEnd) {
        return Error(Peek(),
                     absl::StrCat("expected '}}', got '", Peek().value, "'"));
      }
      Next();
      body->push_back(std::move(stmt));
      continue;
    }
    if (token.kind != Kind::kBlockBegin) {
      return Error(token, "unexpected token");
    }
    if (Peek(1).kind == Kind::kName && stop.contains(Peek(1).value)) {
      *stopped_at = Peek(1).value;
      Next();
      Next();
      return absl::OkStatus();
    }
    absl::StatusOr<std::unique_ptr<Stmt>> stmt = ParseStatement();
    if (!stmt.ok()) return stmt.status();
    body->push_back(*std::move(stmt));
  }
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseStatement() {
  const Token& begin = Next();  // {%
  const Token& name_token = Peek();
  if (name_token.kind != Kind::kName) {
    return Error(name_token, "expected a statement name");
  }
  std::string name = Next().value;
  absl::Status status = Enter(name_token);
  if (!status.ok()) return status;
  auto stmt = std::make_unique<Stmt>();
  stmt->line = begin.line;
  stmt->column = begin.column;
  if (name == "if") {
    status = ParseIf(stmt.get());
  } else if (name == "for") {
    status = ParseFor(stmt.get());
  } else if (name == "set") {
    status = ParseSet(stmt.get());
  } else if (name == "macro") {
    status = ParseMacro(stmt.get());
  } else if (name == "break" || name == "continue") {
    stmt->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    status =
        loop_depth_ == 0
            ? Error(name_token, absl::StrCat("'", name, "' outside a for loop"))
            : ExpectBlockEnd();
  } else if (name == "generation") {
    stmt->kind = Stmt::Kind::kGeneration;
    status = ExpectBlockEnd();
    if (status.ok()) {
      stmt->bodies.emplace_back();
      status = ParseBlockBody(&stmt->bodies[0], "endgeneration", name_token);
    }
  } else if (name == "include" || name == "import" || name == "from" ||
             name == "extends" || name == "block" || name == "call" ||
             name == "filter" || name == "with" || name == "autoescape" ||
             name == "do" || name == "raw" || name == "trans") {
    status = Unsupported(name_token, absl::StrCat("'", name, "' statement"));
  } else {
    status = Error(name_token, absl::StrCat("unknown tag '", name, "'"));
  }
  Leave();
  if (!status.ok()) return status;
  return stmt;
}

absl::Status Parser::ParseBlockBody(Body* body, absl::string_view end_name,
                                    const Token& opened) {
  std::string stopped_at;
  absl::Status status = ParseBody({std::string(end_name)}, body, &stopped_at);
  if (!status.ok()) return status;
  if (stopped_at.empty()) {
    return Error(opened,
                 absl::StrCat("'", opened.value, "' is never closed (missing '",
                              end_name, "')"));
  }
  return ExpectBlockEnd();
}

absl::Status Parser::ParseIf(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kIf;
  const Token& opened = tokens_[index_ - 1];
  while (true) {
    absl::StatusOr<ExprPtr> condition = ParseTuple(true);
    if (!condition.ok()) return condition.status();
    stmt->conditions.push_back(*std::move(condition));
    absl::Status status = ExpectBlockEnd();
    if (!status.ok()) return status;
    stmt->bodies.emplace_back();
    std::string stopped_at;
    status =
        ParseBody({"elif", "else", "endif"}, &stmt->bodies.back(), &stopped_at);
    if (!status.ok()) return status;
    if (stopped_at == "elif") continue;
    if (stopped_at == "else") {
      status = ExpectBlockEnd();
      if (!status.ok()) return status;
      return ParseBlockBody(&stmt->else_body, "endif", opened);
    }
    if (stopped_at.empty()) {
      return Error(opened, "'if' is never closed (missing 'endif')");
    }
    return ExpectBlockEnd();
  }
}

absl::Status Parser::ParseTargets(std::vector<std::string>* targets) {
  bool parenthesized = IsOp("(");
  if (parenthesized) Next();
  while (true) {
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    targets->push_back(*std::move(name));
    if (!IsOp(",")) break;
    Next();
    if (Peek().kind != Kind::kName) break;  // Trailing comma.
  }
  return parenthesized ? ExpectOp(")") : absl::OkStatus();
}

absl::Status Parser::ParseFor(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kFor;
  const Token& opened = tokens_[index_ - 1];
  absl::Status status = ParseTargets(&stmt->targets);
  if (!status.ok()) return status;
  if (!IsName("in")) return Error(Peek(), "expected 'in'");
  Next();
  absl::StatusOr<ExprPtr> iterable = ParseTuple(false);
  if (!iterable.ok()) return iterable.status();
  stmt->expr = *std::move(iterable);
  if (IsName("if")) {
    Next();
    absl::StatusOr<ExprPtr> condition = ParseExpression();
    if (!condition.ok()) return condition.status();
    stmt->condition = *std::move(condition);
  }
  if (IsName("recursive")) return Unsupported(Peek(), "'recursive' loop");
  status = ExpectBlockEnd();
  if (!status.ok()) return status;
  stmt->bodies.emplace_back();
  ++loop_depth_;
  std::string stopped_at;
  status = ParseBody({"else", "endfor"}, &stmt->bodies[0], &stopped_at);
  --loop_depth_;
  if (!status.ok()) return status;
  if (stopped_at.empty()) {
    return Error(opened, "'for' is never closed (missing 'endfor')");
  }
  status = ExpectBlockEnd();
  if (!status.ok() || stopped_at == "endfor") return status;
  int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;  // break/continue in the else branch leave nothing.
  status = ParseBlockBody(&stmt->else_body, "endfor", opened);
  loop_depth_ = saved_loop_depth;
  return status;
}

absl::Status Parser::ParseSet(Stmt* stmt) {
  const Token& opened = tokens_[index_ - 1];
  if (Peek().kind == Kind::kName && IsOp(".", 1)) {
    stmt->targets.push_back(Next().value);
    Next();
    absl::StatusOr<std::string> attribute = ExpectName();
    if (!attribute.ok()) return attribute.status();
    stmt->attribute = *std::move(attribute);
  } else {
    absl::Status status = ParseTargets(&stmt->targets);
    if (!status.ok()) return status;
  }
  if (IsOp("=")) {
    Next();
    stmt->kind = Stmt::Kind::kSet;
    absl::StatusOr<ExprPtr> value = ParseTuple(true);
    if (!value.ok()) return value.status();
    stmt->expr = *std::move(value);
    return ExpectBlockEnd();
  }
  stmt->kind = Stmt::Kind::kSetBlock;
  if (!stmt->attribute.empty() || stmt->targets.size() != 1) {
    return Error(opened, "a block set assigns one name");
  }
  while (IsOp("|")) {
    Next();
    absl::StatusOr<ExprPtr> filter = ParseFilter(nullptr);
    if (!filter.ok()) return filter.status();
    stmt->filters.push_back(*std::move(filter));
  }
  absl::Status status = ExpectBlockEnd();
  if (!status.ok()) return status;
  stmt->bodies.emplace_back();
  return ParseBlockBody(&stmt->bodies[0], "endset", opened);
}

absl::Status Parser::ParseMacro(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kMacro;
  const Token& opened = tokens_[index_ - 1];
  absl::StatusOr<std::string> name = ExpectName();
  if (!name.ok()) return name.status();
  stmt->text = *std::move(name);
  absl::Status status = ExpectOp("(");
  if (!status.ok()) return status;
  while (!IsOp(")")) {
    if (!stmt->targets.empty()) {
      status = ExpectOp(",");
      if (!status.ok()) return status;
      if (IsOp(")")) break;
    }
    absl::StatusOr<std::string> param = ExpectName();
    if (!param.ok()) return param.status();
    stmt->targets.push_back(*std::move(param));
    ExprPtr default_value;
    if (IsOp("=")) {
      Next();
      absl::StatusOr<ExprPtr> value = ParseExpression();
      if (!value.ok()) return value.status();
      default_value = *std::move(value);
    }
    stmt->defaults.push_back(std::move(default_value));
  }
  Next();  // )
  status = ExpectBlockEnd();
  if (!status.ok()) return status;
  stmt->bodies.emplace_back();
  int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  status = ParseBlockBody(&stmt->bodies[0], "endmacro", opened);
  loop_depth_ = saved_loop_depth;
  return status;
}

}  // namespace parser_internal

absl::StatusOr<std::unique_ptr<Program>> Parse(const std::vector<Token>& tokens,
                                               int max_nesting_depth) {
  if (tokens.empty() || tokens.back().kind != Token::Kind::kEnd) {
    return absl::InternalError("token stream without its end");
  }
  return parser_internal::Parser(tokens, max_nesting_depth).Run();
}

}  // namespace castserve::text::jinja
