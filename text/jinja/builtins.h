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

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {

bool IsSupportedFilter(absl::string_view name);
bool IsSupportedTest(absl::string_view name);
// A method of str or dict castserve implements (strip, split, get, ...).
bool IsSupportedMethod(absl::string_view name);

// What builtins need from the render that calls them.
struct BuiltinContext {
  // The largest string or list a builtin may build (Limits'
  // max_output_bytes).
  size_t max_value_bytes = 0;
  // Counts `n` loop iterations against the render's budget.
  std::function<absl::Status(int64_t n)> charge_iterations;
  // Calls a callable value (filters such as map call other filters).
  std::function<absl::StatusOr<Value>(const Value&, const CallArgs&)> call;
};

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                  const CallArgs& args,
                                  const BuiltinContext& context);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input,
                               const CallArgs& args);

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
// nothing for Undefined.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value);

// The text raise_exception was called with; the renderer turns it into an
// error whose message is exactly this.
inline constexpr absl::string_view kRaisedPrefix = "raise_exception: ";

// The globals a render sees besides its context: range, namespace, dict,
// raise_exception, strftime_now (formatting `now()` in `time_zone` as C's
// strftime, which Python's datetime.strftime calls).
Dict MakeGlobals(std::function<absl::Time()> now, absl::TimeZone time_zone,
                 const BuiltinContext* context);

// Python's json.dumps(value, ensure_ascii=False, indent, separators,
// sort_keys) as transformers' tojson filter calls it; `indent` None or
// Undefined means one line.
absl::StatusOr<std::string> ToJson(const Value& value, const Value& indent,
                                   bool sort_keys);
class BoundArgs;
// The same with tojson's bound options (ensure_ascii, indent, separators,
// sort_keys); ResourceExhausted past `max_bytes`.
absl::StatusOr<std::string> ToJsonWithOptions(const Value& value,
                                              const BoundArgs& options,
                                              size_t max_bytes);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_BUILTINS_H_
