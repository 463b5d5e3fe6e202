// The weight policy of a model: which storage format, compute dtype,
// residency and compute-copy policy each of its weights gets, whether its
// transient copies come from a buffer pool, and whether it needs casting
// hooks. These are decided here and only here: the server translates a
// config's `weights` into WeightPolicyOptions (server/servables/proto_dtypes.h
// for the enums), WeightFactory takes WeightOptionsFor for every weight it
// makes, LoadHfModel takes NeedsCastingHooks.
//
// Stateless free functions over WeightPolicyOptions; thread-safe.
#ifndef CASTSERVE_MODELS_LOADING_WEIGHT_POLICY_H_
#define CASTSERVE_MODELS_LOADING_WEIGHT_POLICY_H_

#include <memory>
#include <optional>

#include "absl/strings/string_view.h"
#include "casting/casting_policy.h"
#include "casting/codec/codec.h"
#include "casting/codec/storage_format.h"
#include "casting/device/device.h"
#include "casting/weight.h"
#include "models/loading/prequantized_weights.h"

namespace castserve::models {

// What a config asks of a model's weights; the functions below decide what
// that means for each weight.
struct WeightPolicyOptions {
  casting::Residency residency = casting::Residency::kResident;
  casting::ComputeCopyPolicy compute_copy = casting::ComputeCopyPolicy::kCached;
  // Compute dtype of every layer (F32, F16, BF16).
  casting::ElementType compute_dtype = casting::ElementType::kF32;
  // Absent: no layerwise casting (storage = compute dtype everywhere).
  // Present: its compute dtype is the model's (it overrides compute_dtype),
  // and the weights it casts are resident in its storage format whatever
  // `residency` says (a mapped file cannot hold another format); the
  // weights it keeps follow `residency`.
  std::optional<casting::CastingPolicy> casting;
  // Make resident copies at load instead of at first use.
  bool eager = false;
  // While module i runs, read and decode the weights of the module that
  // runs after it on a background thread (casting_hooks.h). With transient
  // copies on every forward; with cached copies this overlaps the first
  // forward's decoding (the lazy upcast) with its compute.
  bool prefetch = false;
  // With transient copies: reuse the memory of freed compute copies for the
  // next ones of the same shape (casting/memory/buffer_pool.h), one pool per
  // factory, instead of allocating fresh pages every forward. Trades idle
  // memory between forwards for speed.
  bool reuse_transient_buffers = false;
  casting::CodecOptions codec;
  // The model's device: its weights' compute copies, its buffers and its
  // forward live there (server: instance_group kind; placement is checked
  // there with casting/device/device_probe.h).
  casting::Device device;
  // On CUDA: resident storage in pinned host memory, streamed to the device
  // per compute copy, for models larger than the GPU. Mapped storage is in
  // host memory anyway.
  bool storage_on_host = false;
  // The checkpoint's pre-quantized fp8 weights (set by LoadHfModel from
  // config.json and the checkpoint, never from a served config): each keeps
  // its file's format and scales, whatever `casting`'s storage format, with
  // this policy's residency (resident where `casting` casts it), compute
  // dtype and compute-copy policy. Null: none.
  std::shared_ptr<const PrequantizedWeights> prequantized;
};

// The dtype layers compute in under `options`: the casting policy's when
// there is one, else options.compute_dtype.
casting::ElementType EffectiveComputeDtype(const WeightPolicyOptions& options);

// How the weight of module `module_name` of `kind` (the PyTorch class name)
// is kept: a weight the casting policy casts is resident in the policy's
// storage format (a mapped file cannot hold another format); any other is
// stored plain in the compute dtype with options.residency. Compute-copy
// policy, codec options and the device apply to all. Leaves buffer_pool and
// pass_through_integers at their defaults: they are the caller's.
casting::WeightOptions WeightOptionsFor(const WeightPolicyOptions& options,
                                        absl::string_view module_name,
                                        absl::string_view kind);

// True when transient compute copies should reuse freed ones' memory: one
// buffer pool per model. Never on CUDA, whose caching allocator does that.
bool UsesBufferPool(const WeightPolicyOptions& options);

// True when the model needs casting hooks (models/casting_hooks.h): with
// transient compute copies, so that only the running module holds them, and
// with prefetch, which the hooks run.
bool NeedsCastingHooks(const WeightPolicyOptions& options);

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_LOADING_WEIGHT_POLICY_H_
