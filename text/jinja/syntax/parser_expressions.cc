// Parser's expression half: jinja2's expression grammar and precedence.
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/builtins.h"
#include "text/jinja/syntax/parser_internal.h"

namespace castserve::text::jinja::parser_internal {

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
  return Deepened(std::move(tuple));
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
    expr = Deepened(std::move(condition));
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
    left = Deepened(std::move(node));
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
    left = Deepened(std::move(node));
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
  return Deepened(std::move(node));
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
  return Deepened(std::move(node));
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
    left = Deepened(std::move(node));
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
      node = Deepened(std::move(unary));
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
    return Deepened(std::move(node));
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
        absl::Status status = Deepen(item.get());
        if (!status.ok()) return status;
        node = std::move(item);
        continue;
      }
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      ExprPtr attribute = MakeExpr(Expr::Kind::kGetAttr, at);
      attribute->name = *std::move(name);
      attribute->items.push_back(std::move(node));
      absl::Status status = Deepen(attribute.get());
      if (!status.ok()) return status;
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
      status = Deepen(call.get());
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
  return Deepened(std::move(item));
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
      status = Deepen(call.get());
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
  return Deepened(std::move(filter));
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
  return Deepened(std::move(test));
}

}  // namespace castserve::text::jinja::parser_internal
