// Python-style binding of a call's positional and keyword arguments to a
// builtin's parameter names.
//
// Stateless; thread-safe.
#ifndef CASTSERVE_TEXT_JINJA_BOUND_ARGS_H_
#define CASTSERVE_TEXT_JINJA_BOUND_ARGS_H_

#include <cstddef>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/jinja/value.h"

namespace castserve::text::jinja {

class BoundArgs {
 public:
  explicit BoundArgs(size_t count) : values_(count) {}
  bool Has(size_t i) const { return values_[i].has_value(); }
  // The argument, or Undefined when not given.
  const Value& Get(size_t i) const;
  void Set(size_t i, Value value) { values_[i] = std::move(value); }

 private:
  std::vector<std::optional<Value>> values_;
};

// Binds `args` to `names` in order; the first `required` must be given.
// InvalidArgument, naming `function`, for too many arguments, an unknown or
// repeated keyword, or a missing required one.
absl::StatusOr<BoundArgs> BindArgs(const CallArgs& args,
                                   absl::string_view function,
                                   const std::vector<absl::string_view>& names,
                                   size_t required = 0);

}  // namespace castserve::text::jinja

#endif  // CASTSERVE_TEXT_JINJA_BOUND_ARGS_H_
