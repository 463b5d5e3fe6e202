// One render of a parsed template (ast.h): walks its statements with
// jinja2's scoping (a for loop's assignments stay in the loop, a macro sees
// its arguments and the template's top level), evaluates expressions and
// writes the output, within the Limits.
//
// A Renderer is used once, by one thread; the Program and the clock are
// only read. Its recursion (statements, expressions, loops and macro calls
// together) stays within max_render_depth, every value it builds within
// max_value_depth, and it owns the namespaces the template makes.
#ifndef CASTSERVE_TEXT_JINJA_RENDERER_H_
#define CASTSERVE_TEXT_JINJA_RENDERER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "text/jinja/builtins.h"
#include "text/jinja/limits.h"
#include "text/jinja/syntax/ast.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {

class Renderer {
 public:
  // `program` and `clock` outlive the Renderer.
  Renderer(const Program& program, const Limits& limits, platform::Clock* clock,
           absl::TimeZone time_zone);
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // `context` is a dict of the variables the template sees. An error
  // raised by raise_exception(msg) is InvalidArgument with message `msg`
  // prefixed by kRaisedPrefix; limits are ResourceExhausted naming the
  // limit.
  absl::StatusOr<std::string> Render(const Value& context);

 private:
  struct Frame {
    absl::flat_hash_map<std::string, Value> variables;
    Frame* parent = nullptr;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status Step();
  // One level deeper into the render's recursion (Leave undoes it).
  absl::Status Enter();
  void Leave() { --depth_; }
  absl::Status ChargeIterations(int64_t n);
  absl::Status Append(absl::string_view text, std::string* out);
  Value Lookup(const std::string& name, const Frame* frame) const;

  absl::Status Execute(const Body& body, Frame* frame, std::string* out);
  absl::Status ExecuteStatement(const Stmt& stmt, Frame* frame,
                                std::string* out);
  absl::Status ExecuteKind(const Stmt& stmt, Frame* frame, std::string* out);
  absl::Status ExecuteFor(const Stmt& stmt, Frame* frame, std::string* out);
  absl::Status ExecuteSet(const Stmt& stmt, Frame* frame, std::string* out);
  absl::Status Assign(const std::vector<std::string>& targets,
                      const Value& value, Frame* frame);
  Value DefineMacro(const Stmt& stmt);
  absl::StatusOr<Value> CallMacro(const Stmt& stmt, const CallArgs& args);

  // Evaluates within the recursion bound, and refuses a value nested past
  // max_value_depth (EvaluateNode does the work).
  absl::StatusOr<Value> Evaluate(const Expr& expr, Frame* frame);
  absl::StatusOr<Value> EvaluateNode(const Expr& expr, Frame* frame);
  absl::StatusOr<Value> EvaluateOperator(const Expr& expr, Frame* frame);
  absl::StatusOr<Value> EvaluateCall(const Expr& expr, Frame* frame);
  absl::StatusOr<Value> EvaluateFilter(const Expr& expr, const Value& input,
                                       Frame* frame);
  absl::StatusOr<Value> EvaluateTest(const Expr& expr, Frame* frame);
  absl::StatusOr<Value> EvaluateCompare(const Expr& expr, Frame* frame);
  absl::StatusOr<Value> EvaluateContainer(const Expr& expr, Frame* frame);
  absl::Status EvaluateArgs(const Expr& expr, size_t first, Frame* frame,
                            CallArgs* args);
  absl::StatusOr<Value> Call(const Value& callee, const CallArgs& args);

  const Program& program_;
  const Limits limits_;
  NamespaceOwner namespaces_;
  BuiltinContext builtin_context_;
  Dict globals_;
  const Dict* context_ = nullptr;
  Frame* root_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int64_t steps_ = 0;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_RENDERER_H_
