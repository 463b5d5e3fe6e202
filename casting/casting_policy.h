#ifndef CASTSERVE_CASTING_CASTING_POLICY_H_
#define CASTSERVE_CASTING_CASTING_POLICY_H_

#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "casting/codec/storage_format.h"

namespace castserve::casting {

// What the policy decided for the weights of one module.
struct WeightDecision {
  // True when the weight is stored in `storage` and cast to `compute_dtype`
  // for each forward. False: stored plain in the compute dtype
  // (storage == StorageFormat::Plain(compute_dtype)), never lossy.
  bool cast = false;
  // Element type plus scaling of the resident copy. Scaling is only ever set
  // for fp8 elements: none (a plain cast, the published layerwise-casting
  // semantics), one f32 absmax scale per tensor, or one per output row.
  StorageFormat storage;
  ElementType compute_dtype = ElementType::kF32;
  // Why, for logs and the model's status page, e.g.
  // "matches skip pattern 'norm'" or "kind LayerNorm is a normalization layer".
  std::string reason;
};

// The layerwise-casting policy (diffusers `enable_layerwise_casting`
// semantics): decides per module, from its dotted name and its kind (the
// PyTorch class name: "Linear", "Conv2d", "RMSNorm", ...), whether its weights
// are stored narrow and upcast per forward.
//
// Rules, in order (first match wins):
//   1. kind listed in `skip_modules_classes` -> not cast;
//   2. normalization kinds (LayerNorm, RMSNorm, GroupNorm, BatchNorm*, any kind
//      whose name contains "Norm") -> never cast, even with no patterns;
//   3. kinds other than Linear, Conv1d/2d/3d, ConvTranspose1d/2d/3d, Embedding
//      -> not cast;
//   4. a `skip_modules_pattern` regex found (std::regex_search, ECMAScript) in
//      the module's name or in the name of one of its ancestors ("a.b" for
//      "a.b.c") -> not cast. Checking ancestors mirrors diffusers, which stops
//      descending at a skipped module: `^proj_in$` skips `proj_in.0` too;
//   5. otherwise cast.
// Kind names are matched exactly (case-sensitive).
//
// Thread safety: immutable after Create; Decide may be called concurrently.
class CastingPolicy {
 public:
  struct Options {
    ElementType storage_dtype = ElementType::kF8E4M3FN;
    ElementType compute_dtype = ElementType::kBF16;
    // Only with an fp8 storage dtype. To read "F8_E4M3FN:per_row"-style text,
    // use StorageFormat::Parse and copy its element and scaling here.
    Scaling scaling = Scaling::kNone;
    // Set to {} to use no patterns (normalization layers are still skipped).
    std::vector<std::string> skip_modules_pattern = DefaultSkipModulesPattern();
    std::vector<std::string> skip_modules_classes;
    // Whether host-to-device copies of the compute copy may be asynchronous.
    // Carried for the weight layer; Decide does not use it.
    bool non_blocking = false;
  };

  // The published defaults: pos_embed, patch_embed, norm, ^proj_in$,
  // ^proj_out$.
  static std::vector<std::string> DefaultSkipModulesPattern();

  // Bounds on skip_modules_pattern, checked before any pattern is compiled
  // (std::regex compiles by recursion: deep nesting would overflow the
  // stack). Module-name patterns are short.
  static constexpr size_t kMaxPatternLength = 256;
  static constexpr size_t kMaxPatterns = 64;

  // InvalidArgument when: the compute dtype is not a compute type
  // (IsComputeType, i.e. it is fp8); scaling is not kNone while the storage
  // dtype is not fp8; there are more than kMaxPatterns patterns; a pattern is
  // empty, longer than kMaxPatternLength, holds a number of more than nine
  // digits or is not a valid ECMAScript regex (the message names it); a skip
  // class name is empty. A storage dtype wider than the compute dtype is
  // allowed.
  static absl::StatusOr<CastingPolicy> Create(Options options);

  WeightDecision Decide(absl::string_view module_name,
                        absl::string_view module_kind) const;

  const Options& options() const { return options_; }
  bool non_blocking() const { return options_.non_blocking; }

  // True for kinds that are never cast whatever the options (rule 2).
  static bool IsNormalizationKind(absl::string_view kind);
  // True for the layer kinds whose weights can be cast (rule 3).
  static bool IsCastableKind(absl::string_view kind);

 private:
  struct CompiledPattern {
    std::string source;
    std::regex regex;
  };

  CastingPolicy(Options options, std::vector<CompiledPattern> patterns);

  // The first pattern found in `module_name` or an ancestor's name, or
  // nullptr.
  const CompiledPattern* FindSkipPattern(absl::string_view module_name) const;
  WeightDecision Keep(std::string reason) const;

  Options options_;
  std::vector<CompiledPattern> patterns_;
};

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_CASTING_POLICY_H_
