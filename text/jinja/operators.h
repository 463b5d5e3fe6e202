// Python's operators on jinja values, as a chat template's expressions use
// them: arithmetic, `~`, comparisons and `in`. Errors are Python's
// TypeError/ZeroDivisionError messages (InvalidArgument); using an
// Undefined operand is jinja2's UndefinedError (its hint).
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_OPERATORS_H_
#define CASTSERVE_TEXT_JINJA_OPERATORS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {

// + - * / // % ** ~. A string or list result past `bounds` is refused
// (ResourceExhausted naming the operator) before it is built.
absl::StatusOr<Value> BinaryOperation(absl::string_view op, const Value& left,
                                      const Value& right,
                                      const ValueBounds& bounds);
// Unary minus and plus.
absl::StatusOr<Value> Negate(const Value& operand);
absl::StatusOr<Value> UnaryPlus(const Value& operand);
// == != < <= > >= in notin.
absl::StatusOr<bool> Compare(absl::string_view op, const Value& left,
                             const Value& right);

// The error jinja2 raises for using `undefined`.
absl::Status UndefinedError(const Value& undefined);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_OPERATORS_H_
