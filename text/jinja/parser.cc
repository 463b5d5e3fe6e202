#include "text/jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/builtins.h"

namespace castserve::text::jinja {
namespace {

using Kind = Token::Kind;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_depth)
      : tokens_(tokens), max_depth_(max_depth) {}

  absl::StatusOr<std::unique_ptr<Program>> Run();

 private:
  const Token& Peek(size_t ahead = 0) const {
    size_t at = std::min(index_ + ahead, tokens_.size() - 1);
    return tokens_[at];
  }
  const Token& Next() {
    const Token& token = Peek();
    if (index_ < tokens_.size() - 1) ++index_;
    return token;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kOperator && Peek(ahead).value == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kName && Peek(ahead).value == name;
  }
  absl::Status Error(const Token& at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("template syntax error at ",
                     PositionText(at.line, at.column), ": ", what));
  }
  absl::Status Unsupported(const Token& at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported construct ", what, " at ",
                     PositionText(at.line, at.column)));
  }
  absl::Status ExpectOp(absl::string_view op);
  absl::Status ExpectBlockEnd();
  absl::StatusOr<std::string> ExpectName();
  absl::Status Enter(const Token& at);
  void Leave() { --depth_; }

  // Statements up to (not including) a `{% name` with name in `stop`;
  // sets *stopped_at to it ("" at the end of the template).
  absl::Status ParseBody(const absl::flat_hash_set<std::string>& stop,
                         Body* body, std::string* stopped_at);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement();
  absl::Status ParseIf(Stmt* stmt);
  absl::Status ParseFor(Stmt* stmt);
  absl::Status ParseSet(Stmt* stmt);
  absl::Status ParseMacro(Stmt* stmt);
  absl::Status ParseBlockBody(Body* body, absl::string_view end_name,
                              const Token& opened);
  absl::Status ParseTargets(std::vector<std::string>* targets);

  // Expressions, from the loosest binding to the tightest.
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condition);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condition = true);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseBinary(int level);
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr input);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr input);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::Status ParseCallArgs(Expr* call);
  absl::StatusOr<ExprPtr> ParseNumber(const Token& token);

  ExprPtr MakeExpr(Expr::Kind kind, const Token& at) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = at.line;
    expr->column = at.column;
    return expr;
  }

  const std::vector<Token>& tokens_;
  const int max_depth_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

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
  if (++depth_ > max_depth_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("template nests deeper than max_nesting_depth (",
                     max_depth_, ") at ", PositionText(at.line, at.column)));
  }
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

absl::StatusOr<ExprPtr> Parser::ParseTuple(bool with_condition) {
  const Token& start = Peek();
  absl::StatusOr<ExprPtr> first = ParseExpression(with_condition);
  if (!first.ok() || !IsOp(",")) return first;
  ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, start);
  tuple->items.push_back(*std::move(first));
  while (IsOp(",")) {
    Next();
    if (Peek().kind == Kind::kBlockEnd || Peek().kind == Kind::kVariableEnd ||
        IsOp(")") || IsName("if")) {
      break;
    }
    absl::StatusOr<ExprPtr> item = ParseExpression(with_condition);
    if (!item.ok()) return item.status();
    tuple->items.push_back(*std::move(item));
  }
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condition) {
  const Token& start = Peek();
  absl::Status status = Enter(start);
  if (!status.ok()) return status;
  absl::StatusOr<ExprPtr> expr = ParseOr();
  while (expr.ok() && with_condition && IsName("if")) {
    Next();
    ExprPtr condition = MakeExpr(Expr::Kind::kCondition, start);
    absl::StatusOr<ExprPtr> test = ParseOr();
    if (!test.ok()) return test.status();
    condition->items.push_back(*std::move(test));
    condition->items.push_back(*std::move(expr));
    if (IsName("else")) {
      Next();
      absl::StatusOr<ExprPtr> otherwise = ParseExpression(true);
      if (!otherwise.ok()) return otherwise.status();
      condition->items.push_back(*std::move(otherwise));
    } else {
      condition->items.push_back(nullptr);
    }
    expr = std::move(condition);
  }
  Leave();
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  absl::StatusOr<ExprPtr> left = ParseAnd();
  while (left.ok() && IsName("or")) {
    ExprPtr node = MakeExpr(Expr::Kind::kOr, Next());
    absl::StatusOr<ExprPtr> right = ParseAnd();
    if (!right.ok()) return right.status();
    node->items.push_back(*std::move(left));
    node->items.push_back(*std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  absl::StatusOr<ExprPtr> left = ParseNot();
  while (left.ok() && IsName("and")) {
    ExprPtr node = MakeExpr(Expr::Kind::kAnd, Next());
    absl::StatusOr<ExprPtr> right = ParseNot();
    if (!right.ok()) return right.status();
    node->items.push_back(*std::move(left));
    node->items.push_back(*std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  const Token& at = Next();
  absl::Status status = Enter(at);
  if (!status.ok()) return status;
  absl::StatusOr<ExprPtr> operand = ParseNot();
  Leave();
  if (!operand.ok()) return operand.status();
  ExprPtr node = MakeExpr(Expr::Kind::kNot, at);
  node->items.push_back(*std::move(operand));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const Token& start = Peek();
  absl::StatusOr<ExprPtr> first = ParseBinary(0);
  if (!first.ok()) return first;
  ExprPtr node;
  while (true) {
    std::string op;
    if (Peek().kind == Kind::kOperator &&
        (Peek().value == "==" || Peek().value == "!=" || Peek().value == "<" ||
         Peek().value == "<=" || Peek().value == ">" || Peek().value == ">=")) {
      op = Next().value;
    } else if (IsName("in")) {
      Next();
      op = "in";
    } else if (IsName("not") && IsName("in", 1)) {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    if (node == nullptr) {
      node = MakeExpr(Expr::Kind::kCompare, start);
      node->items.push_back(*std::move(first));
    }
    absl::StatusOr<ExprPtr> operand = ParseBinary(0);
    if (!operand.ok()) return operand.status();
    node->ops.push_back(op);
    node->items.push_back(*std::move(operand));
  }
  if (node == nullptr) return first;
  return node;
}

// Levels, loosest first: + -, ~, * / // %, **.
absl::StatusOr<ExprPtr> Parser::ParseBinary(int level) {
  static const std::vector<std::vector<std::string>> kLevels = {
      {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == static_cast<int>(kLevels.size())) return ParseUnary(true);
  absl::StatusOr<ExprPtr> left = ParseBinary(level + 1);
  while (left.ok() && Peek().kind == Kind::kOperator) {
    const std::vector<std::string>& ops = kLevels[level];
    if (std::find(ops.begin(), ops.end(), Peek().value) == ops.end()) break;
    const Token& at = Next();
    ExprPtr node = MakeExpr(Expr::Kind::kBinary, at);
    node->name = at.value;
    absl::StatusOr<ExprPtr> right = ParseBinary(level + 1);
    if (!right.ok()) return right.status();
    node->items.push_back(*std::move(left));
    node->items.push_back(*std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  const Token& at = Peek();
  absl::Status status = Enter(at);
  if (!status.ok()) return status;
  absl::StatusOr<ExprPtr> node;
  if (IsOp("-") || IsOp("+")) {
    Next();
    absl::StatusOr<ExprPtr> operand = ParseUnary(false);
    if (operand.ok()) {
      ExprPtr unary = MakeExpr(
          at.value == "-" ? Expr::Kind::kNegate : Expr::Kind::kPlus, at);
      unary->items.push_back(*std::move(operand));
      node = std::move(unary);
    } else {
      node = operand.status();
    }
  } else {
    node = ParsePrimary();
  }
  if (node.ok()) node = ParsePostfix(*std::move(node));
  if (node.ok() && with_filter) node = ParseFilterChain(*std::move(node));
  Leave();
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseNumber(const Token& token) {
  ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token);
  if (token.kind == Kind::kInteger) {
    int64_t value;
    if (!absl::SimpleAtoi(token.value, &value)) {
      return Unsupported(token, "integer literal beyond 64 bits");
    }
    node->value = Value::Int(value);
  } else {
    node->value = Value::Float(std::strtod(token.value.c_str(), nullptr));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& token = Next();
  switch (token.kind) {
    case Kind::kName: {
      ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token);
      const std::string& name = token.value;
      if (name == "true" || name == "True") {
        node->value = Value::Bool(true);
      } else if (name == "false" || name == "False") {
        node->value = Value::Bool(false);
      } else if (name == "none" || name == "None") {
        node->value = Value::None();
      } else {
        node->kind = Expr::Kind::kName;
        node->name = name;
      }
      return node;
    }
    case Kind::kString: {
      std::string text = token.value;
      while (Peek().kind == Kind::kString) text += Next().value;
      ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token);
      node->value = Value::String(std::move(text));
      return node;
    }
    case Kind::kInteger:
    case Kind::kFloat:
      return ParseNumber(token);
    case Kind::kOperator:
      break;
    default:
      return Error(token, "expected an expression");
  }
  if (token.value == "(") {
    if (IsOp(")")) {
      Next();
      return MakeExpr(Expr::Kind::kTuple, token);
    }
    absl::StatusOr<ExprPtr> inner = ParseTuple(true);
    if (!inner.ok()) return inner;
    absl::Status status = ExpectOp(")");
    if (!status.ok()) return status;
    return inner;
  }
  if (token.value == "[" || token.value == "{") {
    bool is_dict = token.value == "{";
    absl::string_view close = is_dict ? "}" : "]";
    ExprPtr node =
        MakeExpr(is_dict ? Expr::Kind::kDict : Expr::Kind::kList, token);
    while (!IsOp(close)) {
      if (!node->items.empty()) {
        absl::Status status = ExpectOp(",");
        if (!status.ok()) return status;
        if (IsOp(close)) break;
      }
      absl::StatusOr<ExprPtr> item = ParseExpression();
      if (!item.ok()) return item.status();
      node->items.push_back(*std::move(item));
      if (is_dict) {
        absl::Status status = ExpectOp(":");
        if (!status.ok()) return status;
        absl::StatusOr<ExprPtr> value = ParseExpression();
        if (!value.ok()) return value.status();
        node->items.push_back(*std::move(value));
      }
    }
    Next();
    return node;
  }
  return Error(token, absl::StrCat("unexpected '", token.value, "'"));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      const Token& at = Next();
      if (Peek().kind == Kind::kInteger) {
        ExprPtr item = MakeExpr(Expr::Kind::kGetItem, at);
        absl::StatusOr<ExprPtr> index = ParseNumber(Next());
        if (!index.ok()) return index;
        item->items.push_back(std::move(node));
        item->items.push_back(*std::move(index));
        node = std::move(item);
        continue;
      }
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      ExprPtr attribute = MakeExpr(Expr::Kind::kGetAttr, at);
      attribute->name = *std::move(name);
      attribute->items.push_back(std::move(node));
      node = std::move(attribute);
    } else if (IsOp("[")) {
      absl::StatusOr<ExprPtr> item = ParseSubscript(std::move(node));
      if (!item.ok()) return item;
      node = *std::move(item);
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(Expr::Kind::kCall, Peek());
      if (node->kind == Expr::Kind::kGetAttr &&
          !IsSupportedMethod(node->name)) {
        return Unsupported(Peek(), absl::StrCat("method '", node->name, "'"));
      }
      call->items.push_back(std::move(node));
      absl::Status status = ParseCallArgs(call.get());
      if (!status.ok()) return status;
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Token& at = Next();  // [
  ExprPtr parts[3];
  int colons = 0;
  while (!IsOp("]")) {
    if (IsOp(":")) {
      Next();
      if (++colons > 2) return Error(at, "too many ':' in a subscript");
      continue;
    }
    if (parts[colons] != nullptr) return Error(Peek(), "expected ']'");
    absl::StatusOr<ExprPtr> part = ParseExpression();
    if (!part.ok()) return part;
    parts[colons] = *std::move(part);
  }
  Next();  // ]
  if (colons == 0 && parts[0] == nullptr) return Error(at, "empty subscript");
  ExprPtr item =
      MakeExpr(colons == 0 ? Expr::Kind::kGetItem : Expr::Kind::kSlice, at);
  item->items.push_back(std::move(node));
  item->items.push_back(std::move(parts[0]));
  if (colons > 0) {
    item->items.push_back(std::move(parts[1]));
    item->items.push_back(std::move(parts[2]));
  }
  return item;
}

absl::Status Parser::ParseCallArgs(Expr* call) {
  Next();  // (
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      absl::Status status = ExpectOp(",");
      if (!status.ok()) return status;
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) {
      return Unsupported(Peek(), "'*args' or '**kwargs' in a call");
    }
    std::string keyword;
    if (Peek().kind == Kind::kName && IsOp("=", 1)) {
      keyword = Next().value;
      Next();
    } else if (!call->keyword_names.empty()) {
      return Error(Peek(), "positional argument after a keyword argument");
    }
    absl::StatusOr<ExprPtr> argument = ParseExpression();
    if (!argument.ok()) return argument.status();
    call->items.push_back(*std::move(argument));
    if (!keyword.empty()) call->keyword_names.push_back(std::move(keyword));
  }
  Next();  // )
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseFilterChain(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      absl::StatusOr<ExprPtr> filtered = ParseFilter(std::move(node));
      if (!filtered.ok()) return filtered;
      node = *std::move(filtered);
    } else if (IsName("is")) {
      absl::StatusOr<ExprPtr> tested = ParseTest(std::move(node));
      if (!tested.ok()) return tested;
      node = *std::move(tested);
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(Expr::Kind::kCall, Peek());
      call->items.push_back(std::move(node));
      absl::Status status = ParseCallArgs(call.get());
      if (!status.ok()) return status;
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr input) {
  const Token& at = Peek();
  absl::StatusOr<std::string> name = ExpectName();
  if (!name.ok()) return name.status();
  if (!IsSupportedFilter(*name)) {
    return Unsupported(at, absl::StrCat("filter '", *name, "'"));
  }
  ExprPtr filter = MakeExpr(Expr::Kind::kFilter, at);
  filter->name = *std::move(name);
  filter->items.push_back(std::move(input));
  if (IsOp("(")) {
    absl::Status status = ParseCallArgs(filter.get());
    if (!status.ok()) return status;
  }
  return filter;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr input) {
  const Token& at = Next();  // is
  ExprPtr test = MakeExpr(Expr::Kind::kTest, at);
  if (IsName("not")) {
    Next();
    test->negated = true;
  }
  const Token& name_token = Peek();
  std::string name;
  if (name_token.kind == Kind::kName) {
    name = Next().value;
  } else if (name_token.kind == Kind::kOperator &&
             (name_token.value == "==" || name_token.value == "!=" ||
              name_token.value == "<" || name_token.value == "<=" ||
              name_token.value == ">" || name_token.value == ">=")) {
    name = Next().value;
  } else {
    return Error(name_token, "expected a test name after 'is'");
  }
  if (name == "none" || name == "true" || name == "false") {
    // Names of tests, not the literals.
  }
  if (!IsSupportedTest(name)) {
    return Unsupported(name_token, absl::StrCat("test '", name, "'"));
  }
  test->name = name;
  test->items.push_back(std::move(input));
  if (IsOp("(")) {
    absl::Status status = ParseCallArgs(test.get());
    if (!status.ok()) return status;
  } else if ((Peek().kind == Kind::kName || Peek().kind == Kind::kString ||
              Peek().kind == Kind::kInteger || Peek().kind == Kind::kFloat ||
              IsOp("(") || IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error(Peek(), "tests cannot be chained with is");
    absl::StatusOr<ExprPtr> argument = ParsePrimary();
    if (!argument.ok()) return argument;
    absl::StatusOr<ExprPtr> full = ParsePostfix(*std::move(argument));
    if (!full.ok()) return full;
    test->items.push_back(*std::move(full));
  }
  return test;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Program>> Parse(const std::vector<Token>& tokens,
                                               int max_nesting_depth) {
  if (tokens.empty() || tokens.back().kind != Token::Kind::kEnd) {
    return absl::InternalError("token stream without its end");
  }
  return Parser(tokens, max_nesting_depth).Run();
}

}  // namespace castserve::text::jinja
