#include "casting/casting_policy.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace castserve::casting {
namespace {

constexpr std::array<absl::string_view, 8> kCastableKinds = {
    "Linear",          "Conv1d",          "Conv2d",          "Conv3d",
    "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Embedding",
};

// libstdc++'s std::regex reads a back-reference's or a repeat count's
// digits into a long without checking for overflow; nine digits fit an int.
constexpr size_t kMaxDigitsInNumber = 9;

size_t LongestDigitRun(absl::string_view text) {
  size_t longest = 0;
  size_t run = 0;
  for (char c : text) {
    run = absl::ascii_isdigit(static_cast<unsigned char>(c)) ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

absl::StatusOr<std::regex> CompileRegex(const std::string& pattern,
                                        size_t index) {
  if (pattern.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("skip_modules_pattern[", index,
                     "] is empty; an empty regex would skip every module"));
  }
  if (pattern.size() > CastingPolicy::kMaxPatternLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "skip_modules_pattern[", index, "] is ", pattern.size(),
        " characters, above the limit of ", CastingPolicy::kMaxPatternLength));
  }
  if (LongestDigitRun(pattern) > kMaxDigitsInNumber) {
    return absl::InvalidArgumentError(absl::StrCat(
        "skip_modules_pattern[", index, "] '", pattern,
        "' has a number of more than ", kMaxDigitsInNumber, " digits"));
  }
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("skip_modules_pattern[", index, "] '", pattern,
                     "' is not a valid ECMAScript regex: ", e.what()));
  }
}

absl::Status ValidateDtypes(const CastingPolicy::Options& options) {
  if (!IsComputeType(options.compute_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute dtype ", ElementTypeName(options.compute_dtype),
                     " is not supported: compute must be F32, F16 or BF16"));
  }
  if (options.scaling != Scaling::kNone && !IsFp8(options.storage_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scaling ", ScalingName(options.scaling),
                     " needs an fp8 storage dtype, got ",
                     ElementTypeName(options.storage_dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> CastingPolicy::DefaultSkipModulesPattern() {
  return {"pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$"};
}

absl::StatusOr<CastingPolicy> CastingPolicy::Create(Options options) {
  if (absl::Status status = ValidateDtypes(options); !status.ok()) {
    return status;
  }
  for (size_t i = 0; i < options.skip_modules_classes.size(); ++i) {
    if (options.skip_modules_classes[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("skip_modules_classes[", i, "] is empty"));
    }
  }
  if (options.skip_modules_pattern.size() > kMaxPatterns) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.skip_modules_pattern.size(),
        " skip_modules_pattern entries, above the limit of ", kMaxPatterns));
  }
  std::vector<CompiledPattern> patterns;
  for (size_t i = 0; i < options.skip_modules_pattern.size(); ++i) {
    const std::string& source = options.skip_modules_pattern[i];
    absl::StatusOr<std::regex> regex = CompileRegex(source, i);
    if (!regex.ok()) return regex.status();
    patterns.push_back({source, *std::move(regex)});
  }
  return CastingPolicy(std::move(options), std::move(patterns));
}

CastingPolicy::CastingPolicy(Options options,
                             std::vector<CompiledPattern> patterns)
    : options_(std::move(options)), patterns_(std::move(patterns)) {}

bool CastingPolicy::IsNormalizationKind(absl::string_view kind) {
  // LayerNorm, RMSNorm, GroupNorm, BatchNorm1d/2d/3d, InstanceNorm*, ... all
  // contain "Norm".
  return absl::StrContains(kind, "Norm");
}

bool CastingPolicy::IsCastableKind(absl::string_view kind) {
  for (absl::string_view castable : kCastableKinds) {
    if (kind == castable) return true;
  }
  return false;
}

WeightDecision CastingPolicy::Decide(absl::string_view module_name,
                                     absl::string_view module_kind) const {
  for (const std::string& skipped : options_.skip_modules_classes) {
    if (module_kind == skipped) {
      return Keep(
          absl::StrCat("kind ", module_kind, " is in skip_modules_classes"));
    }
  }
  if (IsNormalizationKind(module_kind)) {
    return Keep(
        absl::StrCat("kind ", module_kind, " is a normalization layer"));
  }
  if (!IsCastableKind(module_kind)) {
    return Keep(
        absl::StrCat("kind ", module_kind, " is not a castable layer kind"));
  }
  if (const CompiledPattern* pattern = FindSkipPattern(module_name)) {
    return Keep(absl::StrCat("matches skip pattern '", pattern->source, "'"));
  }
  WeightDecision decision;
  decision.cast = true;
  decision.storage = {options_.storage_dtype, options_.scaling};
  decision.compute_dtype = options_.compute_dtype;
  decision.reason = absl::StrCat("kind ", module_kind, " is castable");
  return decision;
}

const CastingPolicy::CompiledPattern* CastingPolicy::FindSkipPattern(
    absl::string_view module_name) const {
  // The prefixes ending before each '.' are the ancestors' names; the whole
  // name comes last.
  size_t end = 0;
  while (true) {
    end = module_name.find('.', end);
    const absl::string_view prefix = module_name.substr(0, end);
    for (const CompiledPattern& pattern : patterns_) {
      if (std::regex_search(prefix.begin(), prefix.end(), pattern.regex)) {
        return &pattern;
      }
    }
    if (end == absl::string_view::npos) break;
    ++end;
  }
  return nullptr;
}

WeightDecision CastingPolicy::Keep(std::string reason) const {
  WeightDecision decision;
  decision.cast = false;
  decision.storage = StorageFormat::Plain(options_.compute_dtype);
  decision.compute_dtype = options_.compute_dtype;
  decision.reason = std::move(reason);
  return decision;
}

}  // namespace castserve::casting
