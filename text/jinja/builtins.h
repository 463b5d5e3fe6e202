// jinja2's filters and tests, Python's str/dict methods and the globals
// (range, namespace, dict, raise_exception, strftime_now) as chat templates
// use them under transformers' environment. The tables here are the one
// list of what castserve supports: the parser refuses names outside them.
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_BUILTINS_H_
#define CASTSERVE_TEXT_JINJA_BUILTINS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {

bool IsSupportedFilter(absl::string_view name);
bool IsSupportedTest(absl::string_view name);
// A method of str or dict castserve implements (strip, split, get, ...).
bool IsSupportedMethod(absl::string_view name);

// What builtins need from the render that calls them.
struct BuiltinContext {
  // What any string or list a builtin builds, or text it prints, may reach.
  ValueBounds bounds;
  // Counts `n` loop iterations against the render's budget.
  std::function<absl::Status(int64_t n)> charge_iterations;
  // Where namespace() makes its namespaces.
  NamespaceOwner* namespaces = nullptr;
};

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args,
                                  const BuiltinContext& context);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input,
                               const CallArgs& args,
                               const BuiltinContext& context);

// obj.name as jinja2's sandbox resolves it: a str/dict method bound to
// `object`, else dict item or namespace attribute, else Undefined naming
// what was missing. Undefined `object` is an error.
absl::StatusOr<Value> GetAttribute(const Value& object, absl::string_view name,
                                   const BuiltinContext& context);
// obj[key]: list/str index (negative from the end), dict key; Undefined
// when missing, as jinja2.
absl::StatusOr<Value> GetItem(const Value& object, const Value& key,
                              const BuiltinContext& context);
// obj[start:stop:step] (each may be None).
absl::StatusOr<Value> Slice(const Value& object, const Value& start,
                            const Value& stop, const Value& step,
                            const BuiltinContext& context);
// The items a for loop visits: list items, str characters, dict keys;
// nothing for Undefined. A str or dict whose list of items would count
// more than `max_bytes` (kItemBytes per item) is refused before it is
// built.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value,
                                           size_t max_bytes);

// The text raise_exception was called with; the renderer turns it into an
// error whose message is exactly this.
inline constexpr absl::string_view kRaisedPrefix = "raise_exception: ";

// The globals a render sees besides its context: range, namespace, dict,
// raise_exception, strftime_now (formatting `clock`'s Now() in `time_zone`
// as C's strftime, which Python's datetime.strftime calls). `clock` and
// `context` outlive the globals.
Dict MakeGlobals(platform::Clock* clock, absl::TimeZone time_zone,
                 const BuiltinContext* context);

class BoundArgs;
// Python's json.dumps(value, ensure_ascii, indent, separators, sort_keys)
// as transformers' tojson filter calls it, with the filter's bound options
// in that order (indent None or Undefined: one line; an int n: n spaces,
// none when n <= 0; a str: itself). ResourceExhausted, while it writes,
// past bounds.max_bytes or bounds.max_depth.
absl::StatusOr<std::string> ToJson(const Value& value, const BoundArgs& options,
                                   const ValueBounds& bounds);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_BUILTINS_H_
