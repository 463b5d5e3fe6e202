#include "text/jinja/bound_args.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace castserve::text::jinja {

const Value& BoundArgs::Get(size_t i) const {
  static const Value* const kMissing = new Value();
  return values_[i].has_value() ? *values_[i] : *kMissing;
}

absl::StatusOr<BoundArgs> BindArgs(const CallArgs& args,
                                   absl::string_view function,
                                   const std::vector<absl::string_view>& names,
                                   size_t required) {
  if (args.positional.size() > names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, "() takes at most ", names.size(),
                     " argument(s) (", args.positional.size(), " given)"));
  }
  BoundArgs bound(names.size());
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound.Set(i, args.positional[i]);
  }
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < names.size() && names[i] != name) ++i;
    if (i == names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          function, "() got an unexpected keyword argument '", name, "'"));
    }
    if (bound.Has(i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          function, "() got multiple values for argument '", name, "'"));
    }
    bound.Set(i, value);
  }
  for (size_t i = 0; i < required; ++i) {
    if (!bound.Has(i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          function, "() missing required argument '", names[i], "'"));
    }
  }
  return bound;
}

}  // namespace castserve::text::jinja
