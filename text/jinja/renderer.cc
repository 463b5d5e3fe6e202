#include "text/jinja/renderer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/operators.h"
#include "text/jinja/syntax/lexer.h"

namespace castserve::text::jinja {
namespace {

absl::Status AtPosition(const absl::Status& status, int line, int column) {
  if (status.ok() || line == 0 ||
      absl::StartsWith(status.message(), kRaisedPrefix) ||
      absl::StrContains(status.message(), " (at line ")) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " (at ", PositionText(line, column), ")"));
}

}  // namespace

Renderer::Renderer(const Program& program, const Limits& limits,
                   platform::Clock* clock, absl::TimeZone time_zone)
    : program_(program), limits_(limits) {
  builtin_context_.bounds = {limits_.max_output_bytes, limits_.max_value_depth};
  builtin_context_.charge_iterations = [this](int64_t n) {
    return ChargeIterations(n);
  };
  builtin_context_.namespaces = &namespaces_;
  globals_ = MakeGlobals(clock, time_zone, &builtin_context_);
}

absl::Status Renderer::Enter() {
  if (++depth_ > limits_.max_render_depth) {
    --depth_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "statements, expressions, loops and macro calls nest deeper than "
        "max_render_depth (",
        limits_.max_render_depth, ")"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Step() {
  if (++steps_ > limits_.max_steps) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "render exceeded max_steps (", limits_.max_steps, " evaluations)"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::ChargeIterations(int64_t n) {
  iterations_ += n;
  if (n < 0 || iterations_ > limits_.max_loop_iterations) {
    return absl::ResourceExhaustedError(
        absl::StrCat("render exceeded max_loop_iterations (",
                     limits_.max_loop_iterations, ")"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Append(absl::string_view text, std::string* out) {
  absl::Status status = CheckValueBytes("the output", out->size() + text.size(),
                                        limits_.max_output_bytes);
  if (status.ok()) out->append(text.data(), text.size());
  return status;
}

absl::StatusOr<std::string> Renderer::Render(const Value& context) {
  if (!context.is_dict()) {
    return absl::InvalidArgumentError("the render context must be a dict");
  }
  if (context.depth() > limits_.max_value_depth) {
    return ValueTooDeep(limits_.max_value_depth);
  }
  context_ = &context.dict();
  Frame root;
  root_ = &root;
  std::string out;
  absl::Status status = Execute(program_.body, &root, &out);
  root_ = nullptr;
  if (!status.ok()) return status;
  return out;
}

Value Renderer::Lookup(const std::string& name, const Frame* frame) const {
  for (; frame != nullptr; frame = frame->parent) {
    auto it = frame->variables.find(name);
    if (it != frame->variables.end()) return it->second;
  }
  if (const Value* value = context_->Find(name)) return *value;
  if (const Value* value = globals_.Find(name)) return *value;
  return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
}

absl::Status Renderer::Execute(const Body& body, Frame* frame,
                               std::string* out) {
  for (const auto& stmt : body) {
    absl::Status status = ExecuteStatement(*stmt, frame, out);
    if (!status.ok()) return AtPosition(status, stmt->line, stmt->column);
    if (flow_ != Flow::kNormal) break;
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecuteStatement(const Stmt& stmt, Frame* frame,
                                        std::string* out) {
  absl::Status status = Step();
  if (status.ok()) status = Enter();
  if (!status.ok()) return status;
  status = ExecuteKind(stmt, frame, out);
  Leave();
  return status;
}

absl::Status Renderer::ExecuteKind(const Stmt& stmt, Frame* frame,
                                   std::string* out) {
  switch (stmt.kind) {
    case Stmt::Kind::kData:
      return Append(stmt.text, out);
    case Stmt::Kind::kOutput: {
      absl::StatusOr<Value> value = Evaluate(*stmt.expr, frame);
      if (!value.ok()) return value.status();
      // Printed straight into the output, which it may not grow past
      // max_output_bytes.
      return AppendStr(*value, builtin_context_.bounds, out);
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < stmt.conditions.size(); ++i) {
        absl::StatusOr<Value> condition = Evaluate(*stmt.conditions[i], frame);
        if (!condition.ok()) return condition.status();
        if (Truthy(*condition)) return Execute(stmt.bodies[i], frame, out);
      }
      return Execute(stmt.else_body, frame, out);
    case Stmt::Kind::kFor:
      return ExecuteFor(stmt, frame, out);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      return ExecuteSet(stmt, frame, out);
    case Stmt::Kind::kMacro:
      frame->variables[stmt.text] = DefineMacro(stmt);
      return absl::OkStatus();
    case Stmt::Kind::kBreak:
      flow_ = Flow::kBreak;
      return absl::OkStatus();
    case Stmt::Kind::kContinue:
      flow_ = Flow::kContinue;
      return absl::OkStatus();
    case Stmt::Kind::kGeneration:
      return Execute(stmt.bodies[0], frame, out);
  }
  return absl::InternalError("unknown statement");
}

namespace {

// jinja2's loop object (a namespace, so that `loop.index` finds the item
// before dict's and list's own attributes). depth is 1: recursive loops are
// not supported.
Value LoopObject(size_t index, const std::vector<Value>& items,
                 NamespaceOwner* namespaces) {
  size_t length = items.size();
  Dict loop;
  loop.Set("index", Value::Int(index + 1));
  loop.Set("index0", Value::Int(index));
  loop.Set("revindex", Value::Int(length - index));
  loop.Set("revindex0", Value::Int(length - index - 1));
  loop.Set("first", Value::Bool(index == 0));
  loop.Set("last", Value::Bool(index + 1 == length));
  loop.Set("length", Value::Int(length));
  loop.Set("depth", Value::Int(1));
  loop.Set("depth0", Value::Int(0));
  loop.Set("previtem", index > 0
                           ? items[index - 1]
                           : Value::Undefined("there is no previous item"));
  loop.Set("nextitem", index + 1 < length
                           ? items[index + 1]
                           : Value::Undefined("there is no next item"));
  loop.Set(
      "cycle",
      Value::Function(
          "loop.cycle", [index](const CallArgs& args) -> absl::StatusOr<Value> {
            if (args.positional.empty()) {
              return absl::InvalidArgumentError("no items for cycling given");
            }
            return args.positional[index % args.positional.size()];
          }));
  return namespaces->Create(std::move(loop));
}

}  // namespace

absl::Status Renderer::ExecuteFor(const Stmt& stmt, Frame* frame,
                                  std::string* out) {
  absl::StatusOr<Value> iterable = Evaluate(*stmt.expr, frame);
  if (!iterable.ok()) return iterable.status();
  absl::StatusOr<std::vector<Value>> all =
      Iterate(*iterable, limits_.max_output_bytes);
  if (!all.ok()) return all.status();
  std::vector<Value> items;
  if (stmt.condition == nullptr) {
    items = *std::move(all);
  } else {
    for (const Value& item : *all) {
      absl::Status status = ChargeIterations(1);
      if (!status.ok()) return status;
      Frame scope{{}, frame};
      status = Assign(stmt.targets, item, &scope);
      if (!status.ok()) return status;
      absl::StatusOr<Value> keep = Evaluate(*stmt.condition, &scope);
      if (!keep.ok()) return keep.status();
      if (Truthy(*keep)) items.push_back(item);
    }
  }
  // As jinja2 compiles for/else: the else branch runs unless an iteration
  // reached the end of the body (break and continue do not).
  bool completed_an_iteration = false;
  absl::Status status;
  for (size_t i = 0; i < items.size() && status.ok(); ++i) {
    status = ChargeIterations(1);
    if (!status.ok()) break;
    Frame scope{{}, frame};
    status = Assign(stmt.targets, items[i], &scope);
    if (!status.ok()) break;
    scope.variables["loop"] = LoopObject(i, items, &namespaces_);
    status = Execute(stmt.bodies[0], &scope, out);
    Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kNormal) completed_an_iteration = true;
    if (flow == Flow::kBreak) break;
  }
  if (!status.ok() || completed_an_iteration) return status;
  return Execute(stmt.else_body, frame, out);
}

absl::Status Renderer::Assign(const std::vector<std::string>& targets,
                              const Value& value, Frame* frame) {
  if (targets.size() == 1) {
    frame->variables[targets[0]] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Value>> items =
      Iterate(value, limits_.max_output_bytes);
  if (!items.ok()) return items.status();
  if (value.is_undefined()) return UndefinedError(value);
  if (items->size() != targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(items->size() < targets.size() ? "not enough" : "too many",
                     " values to unpack (expected ", targets.size(), ", got ",
                     items->size(), ")"));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    frame->variables[targets[i]] = (*items)[i];
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecuteSet(const Stmt& stmt, Frame* frame,
                                  std::string* out) {
  Value value;
  if (stmt.kind == Stmt::Kind::kSet) {
    absl::StatusOr<Value> evaluated = Evaluate(*stmt.expr, frame);
    if (!evaluated.ok()) return evaluated.status();
    value = *std::move(evaluated);
  } else {
    std::string text;
    absl::Status status = Execute(stmt.bodies[0], frame, &text);
    if (!status.ok()) return status;
    value = Value::String(std::move(text));
    for (const ExprPtr& filter : stmt.filters) {
      absl::StatusOr<Value> filtered = EvaluateFilter(*filter, value, frame);
      if (!filtered.ok()) return filtered.status();
      value = *std::move(filtered);
    }
  }
  if (stmt.attribute.empty()) return Assign(stmt.targets, value, frame);
  Value target = Lookup(stmt.targets[0], frame);
  if (target.kind() != Value::Kind::kNamespace) {
    return absl::InvalidArgumentError(
        "can't assign attribute on non-namespace object");
  }
  if (absl::StartsWith(stmt.attribute, "_")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Chat templates cannot store underscore-prefixed attributes on a "
        "namespace, but got '",
        stmt.attribute, "'"));
  }
  target.namespace_attributes().Set(stmt.attribute, std::move(value));
  return absl::OkStatus();
}

Value Renderer::DefineMacro(const Stmt& stmt) {
  return Value::Function(stmt.text, [this, &stmt](const CallArgs& args) {
    return CallMacro(stmt, args);
  });
}

absl::StatusOr<Value> Renderer::CallMacro(const Stmt& stmt,
                                          const CallArgs& args) {
  if (args.positional.size() > stmt.targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("macro '", stmt.text, "' takes not more than ",
                     stmt.targets.size(), " argument(s)"));
  }
  Frame scope{{}, root_};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope.variables[stmt.targets[i]] = args.positional[i];
  }
  for (const auto& [name, value] : args.keyword) {
    if (std::find(stmt.targets.begin(), stmt.targets.end(), name) ==
        stmt.targets.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "macro '", stmt.text, "' takes no keyword argument '", name, "'"));
    }
    scope.variables[name] = value;
  }
  for (size_t i = 0; i < stmt.targets.size(); ++i) {
    if (scope.variables.contains(stmt.targets[i])) continue;
    if (stmt.defaults[i] == nullptr) {
      scope.variables[stmt.targets[i]] = Value::Undefined(
          absl::StrCat("parameter '", stmt.targets[i], "' was not provided"));
      continue;
    }
    absl::StatusOr<Value> value = Evaluate(*stmt.defaults[i], &scope);
    if (!value.ok()) return value.status();
    scope.variables[stmt.targets[i]] = *std::move(value);
  }
  absl::Status status = Enter();
  if (!status.ok()) return status;
  std::string text;
  Flow saved_flow = flow_;
  flow_ = Flow::kNormal;
  status = Execute(stmt.bodies[0], &scope, &text);
  flow_ = saved_flow;
  Leave();
  if (!status.ok()) return status;
  return Value::String(std::move(text));
}

absl::StatusOr<Value> Renderer::Call(const Value& callee,
                                     const CallArgs& args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (callee.kind() != Value::Kind::kCallable) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", TypeName(callee), "' object is not callable"));
  }
  return callee.function()(args);
}

}  // namespace castserve::text::jinja
