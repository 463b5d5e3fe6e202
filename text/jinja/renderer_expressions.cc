// Renderer's expression half: evaluation of ast.h's Expr nodes.
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/operators.h"
#include "text/jinja/renderer.h"

namespace castserve::text::jinja {

absl::StatusOr<Value> Renderer::Evaluate(const Expr& expr, Frame* frame) {
  absl::Status status = Step();
  if (status.ok()) status = Enter();
  if (!status.ok()) return status;
  absl::StatusOr<Value> value = EvaluateNode(expr, frame);
  Leave();
  // Each node adds a level or two at most: checked at every node, no value
  // grows far past the bound.
  if (value.ok() && value->depth() > limits_.max_value_depth) {
    return ValueTooDeep(limits_.max_value_depth);
  }
  return value;
}

absl::StatusOr<Value> Renderer::EvaluateNode(const Expr& expr, Frame* frame) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.value;
    case Expr::Kind::kName:
      return Lookup(expr.name, frame);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvaluateContainer(expr, frame);
    case Expr::Kind::kGetAttr: {
      absl::StatusOr<Value> object = Evaluate(*expr.items[0], frame);
      if (!object.ok()) return object;
      return GetAttribute(*object, expr.name, builtin_context_);
    }
    case Expr::Kind::kGetItem: {
      absl::StatusOr<Value> object = Evaluate(*expr.items[0], frame);
      if (!object.ok()) return object;
      absl::StatusOr<Value> key = Evaluate(*expr.items[1], frame);
      if (!key.ok()) return key;
      return GetItem(*object, *key, builtin_context_);
    }
    case Expr::Kind::kSlice: {
      Value parts[4];
      for (int i = 0; i < 4; ++i) {
        if (expr.items[i] == nullptr) {
          parts[i] = Value::None();
          continue;
        }
        absl::StatusOr<Value> part = Evaluate(*expr.items[i], frame);
        if (!part.ok()) return part;
        parts[i] = *std::move(part);
      }
      return Slice(parts[0], parts[1], parts[2], parts[3], builtin_context_);
    }
    case Expr::Kind::kCall:
      return EvaluateCall(expr, frame);
    case Expr::Kind::kFilter: {
      absl::StatusOr<Value> input = Evaluate(*expr.items[0], frame);
      if (!input.ok()) return input;
      return EvaluateFilter(expr, *input, frame);
    }
    case Expr::Kind::kTest:
      return EvaluateTest(expr, frame);
    case Expr::Kind::kCompare:
      return EvaluateCompare(expr, frame);
    case Expr::Kind::kCondition: {
      absl::StatusOr<Value> condition = Evaluate(*expr.items[0], frame);
      if (!condition.ok()) return condition;
      if (Truthy(*condition)) return Evaluate(*expr.items[1], frame);
      if (expr.items[2] == nullptr) {
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else "
            "section was defined.");
      }
      return Evaluate(*expr.items[2], frame);
    }
    default:
      return EvaluateOperator(expr, frame);
  }
}

absl::StatusOr<Value> Renderer::EvaluateOperator(const Expr& expr,
                                                 Frame* frame) {
  absl::StatusOr<Value> left = Evaluate(*expr.items[0], frame);
  if (!left.ok()) return left;
  switch (expr.kind) {
    case Expr::Kind::kNot:
      return Value::Bool(!Truthy(*left));
    case Expr::Kind::kNegate:
      return Negate(*left);
    case Expr::Kind::kPlus:
      return UnaryPlus(*left);
    case Expr::Kind::kAnd:
      if (!Truthy(*left)) return left;
      return Evaluate(*expr.items[1], frame);
    case Expr::Kind::kOr:
      if (Truthy(*left)) return left;
      return Evaluate(*expr.items[1], frame);
    case Expr::Kind::kBinary: {
      absl::StatusOr<Value> right = Evaluate(*expr.items[1], frame);
      if (!right.ok()) return right;
      return BinaryOperation(expr.name, *left, *right, builtin_context_.bounds);
    }
    default:
      return absl::InternalError("unknown expression");
  }
}

absl::StatusOr<Value> Renderer::EvaluateContainer(const Expr& expr,
                                                  Frame* frame) {
  absl::Status status = CheckValueBytes(
      "a literal", expr.items.size() * kItemBytes, limits_.max_output_bytes);
  if (!status.ok()) return status;
  if (expr.kind != Expr::Kind::kDict) {
    std::vector<Value> items;
    items.reserve(expr.items.size());
    for (const ExprPtr& item : expr.items) {
      absl::StatusOr<Value> value = Evaluate(*item, frame);
      if (!value.ok()) return value;
      items.push_back(*std::move(value));
    }
    return Value::List(std::move(items), expr.kind == Expr::Kind::kTuple);
  }
  Dict dict;
  for (size_t i = 0; i + 1 < expr.items.size(); i += 2) {
    absl::StatusOr<Value> key = Evaluate(*expr.items[i], frame);
    if (!key.ok()) return key;
    if (!key->is_string()) {
      return absl::UnimplementedError(absl::StrCat(
          "unsupported construct: a dict key of type '", TypeName(*key),
          "' (castserve's dicts have string keys)"));
    }
    absl::StatusOr<Value> value = Evaluate(*expr.items[i + 1], frame);
    if (!value.ok()) return value;
    dict.Set(key->string_value(), *std::move(value));
  }
  return Value::FromDict(std::move(dict));
}

absl::Status Renderer::EvaluateArgs(const Expr& expr, size_t first,
                                    Frame* frame, CallArgs* args) {
  size_t keyword_start = expr.items.size() - expr.keyword_names.size();
  for (size_t i = first; i < expr.items.size(); ++i) {
    absl::StatusOr<Value> value = Evaluate(*expr.items[i], frame);
    if (!value.ok()) return value.status();
    if (i < keyword_start) {
      args->positional.push_back(*std::move(value));
    } else {
      args->keyword.emplace_back(expr.keyword_names[i - keyword_start],
                                 *std::move(value));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Renderer::EvaluateCall(const Expr& expr, Frame* frame) {
  absl::StatusOr<Value> callee = Evaluate(*expr.items[0], frame);
  if (!callee.ok()) return callee;
  CallArgs args;
  absl::Status status = EvaluateArgs(expr, 1, frame, &args);
  if (!status.ok()) return status;
  return Call(*callee, args);
}

absl::StatusOr<Value> Renderer::EvaluateFilter(const Expr& expr,
                                               const Value& input,
                                               Frame* frame) {
  CallArgs args;
  absl::Status status = EvaluateArgs(expr, 1, frame, &args);
  if (!status.ok()) return status;
  return ApplyFilter(expr.name, input, args, builtin_context_);
}

absl::StatusOr<Value> Renderer::EvaluateTest(const Expr& expr, Frame* frame) {
  absl::StatusOr<Value> input = Evaluate(*expr.items[0], frame);
  if (!input.ok()) return input;
  CallArgs args;
  absl::Status status = EvaluateArgs(expr, 1, frame, &args);
  if (!status.ok()) return status;
  absl::StatusOr<bool> result =
      ApplyTest(expr.name, *input, args, builtin_context_);
  if (!result.ok()) return result.status();
  return Value::Bool(*result != expr.negated);
}

absl::StatusOr<Value> Renderer::EvaluateCompare(const Expr& expr,
                                                Frame* frame) {
  absl::StatusOr<Value> left = Evaluate(*expr.items[0], frame);
  if (!left.ok()) return left;
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    absl::StatusOr<Value> right = Evaluate(*expr.items[i + 1], frame);
    if (!right.ok()) return right;
    absl::StatusOr<bool> holds = Compare(expr.ops[i], *left, *right);
    if (!holds.ok()) return holds.status();
    if (!*holds) return Value::Bool(false);
    left = *std::move(right);
  }
  return Value::Bool(true);
}

}  // namespace castserve::text::jinja
