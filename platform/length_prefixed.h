// Length-prefixed byte strings: each element a 4-byte little-endian length,
// then that many bytes. The raw form of KServe v2's BYTES tensors, which the
// daemon's frontends and castserve-client both read.
#ifndef CASTSERVE_PLATFORM_LENGTH_PREFIXED_H_
#define CASTSERVE_PLATFORM_LENGTH_PREFIXED_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace castserve::platform {

// The elements of `raw`, in order; nullopt unless `raw` is exactly a
// sequence of whole elements (a length past the end, or 1-3 bytes left).
std::optional<std::vector<std::string>> SplitLengthPrefixed(
    absl::string_view raw);

// Appends `element` in that form to `*raw`.
void AppendLengthPrefixed(absl::string_view element, std::string* raw);

// `elements` in that form.
std::string JoinLengthPrefixed(const std::vector<std::string>& elements);

}  // namespace castserve::platform

#endif  // CASTSERVE_PLATFORM_LENGTH_PREFIXED_H_
