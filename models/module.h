// The module tree: the model as nodes named like the checkpoint's keys
// ("encoder.layer.3.attention.self.query"), each with a kind ("Linear",
// "LayerNorm", ...), its own weights (casting::Weight) and children.
//
// Forward hooks are how the weight policy, prefetch, memory scopes and timing
// attach without the layers knowing: every module's forward runs inside a
// ModuleCall, which runs the pre-forward hooks, then the layer's math, then
// the post-forward hooks (in reverse order of registration).
//
// Per-forward state lives in a ForwardContext, never in the modules, so that
// concurrent forwards of one model share the tree safely: the compute copies
// a forward holds (ComputeHandles) belong to its context.
//
// Errors inside a forward (a weight whose file vanished, a bad input found
// deep in a layer) are thrown as c10::Error (TORCH_CHECK) like LibTorch's own
// errors; the one wrapper around model execution turns them into a Status.
#ifndef CASTSERVE_MODELS_MODULE_H_
#define CASTSERVE_MODELS_MODULE_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "c10/util/Exception.h"
#include "casting/weight.h"
#include "models/cancellation.h"

namespace castserve::models {

class Module;

// A c10::Error that keeps a Status, so that Model::Forward returns its code
// rather than INTERNAL.
class StatusError : public c10::Error {
 public:
  explicit StatusError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Thrown inside a forward when a weight's compute copy cannot be made (its
// file was truncated: DATA_LOSS, ...).
class WeightUnavailableError : public StatusError {
 public:
  WeightUnavailableError(absl::string_view weight_name,
                         const absl::Status& status);
};

// Acquires the compute copy of `weight` or throws WeightUnavailableError.
casting::ComputeHandle AcquireOrThrow(casting::Weight& weight);

// The state of one forward pass: the compute copies held for it, by module.
// Owned by the caller of the model's forward; used by one thread at a time.
class ForwardContext {
 public:
  // `cancellation` (may be null; must outlive the context) is polled before
  // every module's forward.
  explicit ForwardContext(const Cancellation* cancellation = nullptr)
      : cancellation_(cancellation) {}
  ForwardContext(const ForwardContext&) = delete;
  ForwardContext& operator=(const ForwardContext&) = delete;

  // Holds `handle` for `module` until Release(module) or the end of the
  // forward.
  void Hold(const Module* module, absl::string_view local_name,
            casting::ComputeHandle handle);
  // The held compute tensor, or nullptr.
  const at::Tensor* Find(const Module* module,
                         absl::string_view local_name) const;
  // Drops what is held for `module` (transient copies are freed when their
  // last holder lets go).
  void Release(const Module* module);
  // Number of modules with held compute copies right now.
  int modules_holding() const { return static_cast<int>(held_.size()); }
  // Throws StatusError(CANCELLED) naming `module` once the forward's
  // cancellation is set.
  void ThrowIfCancelled(const Module& module) const;

  // The rows of activations the forward computes with, as the last layer
  // that saw them noted (an embedding its ids, a Linear its input rows);
  // -1 before any did. Read by Module::ComputesFromStorage through the
  // casting hooks, which must decide before a layer runs whether it needs a
  // compute copy (and the next layer a prefetch).
  void NoteActivationRows(int64_t rows) { activation_rows_ = rows; }
  int64_t activation_rows() const { return activation_rows_; }

 private:
  const Cancellation* const cancellation_;
  int64_t activation_rows_ = -1;
  std::map<const Module*, std::map<std::string, casting::ComputeHandle>> held_;
};

// Called before (pre) or after (post) a module's forward. Hooks must be
// thread-safe: concurrent forwards call them concurrently, each with its own
// context. A pre-hook that fails throws c10::Error; post-hooks run during
// stack unwinding too and must not throw.
using ForwardHook = std::function<void(const Module& module, ForwardContext&)>;

class Module {
 public:
  Module(std::string name, std::string kind);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Dotted name as in the checkpoint ("" for the root); kind as PyTorch's
  // class name ("Linear", "Conv2d", "Embedding", "LayerNorm", "RMSNorm").
  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }

  // Own weights by local name ("weight", "bias"). The full checkpoint key is
  // name() + "." + local name.
  void AddWeight(std::string local_name,
                 std::unique_ptr<casting::Weight> weight);
  casting::Weight* weight(absl::string_view local_name) const;

  // True for a module that reads its weights itself during its forward (an
  // embedding gathering rows of a transient table) instead of using whole
  // compute copies: the casting hooks neither acquire nor prefetch them.
  virtual bool ReadsOwnWeights() const { return false; }
  // True when this forward's use of own weight `local_name` reads its
  // storage instead of a compute copy (models/kernels/storage_product.h), given
  // the rows `context` noted: the casting hooks then neither acquire nor
  // prefetch a compute copy of it.
  virtual bool ComputesFromStorage(absl::string_view local_name,
                                   const ForwardContext& context) const {
    return false;
  }
  // The module whose weights this one's forward multiplies by, holding
  // their compute copies while it runs (a tied lm_head: the embedding
  // table), or null. The configured footprint counts those copies on this
  // module's path (models/configured_footprint.h).
  virtual const Module* BorrowsWeightsOf() const { return nullptr; }
  // Called by Model::Demote for a tier below kHot, with no forward running:
  // drops what the module derived from its weights' compute copies and keeps
  // between forwards (a packed encoder layer's packed weights) into
  // `released`, so that the memory goes with them once Demote frees it; its
  // next forward derives it again.
  virtual void DropDerivedCopies(casting::ReleasedMemory& released) {}
  // Bytes of what the module derived and keeps (above) now, and the most it
  // keeps once it serves under the weight policy it was built with:
  // ConfiguredFootprint counts the latter as cached compute bytes (a tier
  // below kHot drops them with the cached copies).
  virtual int64_t DerivedBytes() const { return 0; }
  virtual int64_t ConfiguredDerivedBytes() const { return 0; }
  const std::map<std::string, std::unique_ptr<casting::Weight>>& weights()
      const {
    return weights_;
  }

  // Takes ownership of `child` and returns it.
  template <typename T>
  T* AddChild(std::unique_ptr<T> child) {
    T* raw = child.get();
    children_.push_back(std::move(child));
    return raw;
  }
  std::vector<Module*> children() const;

  // Calls `visit` on this module and every descendant, parents first, in
  // registration order.
  void Visit(const std::function<void(Module&)>& visit);

  // Hooks run in registration order (pre) and reverse order (post).
  // Returns an id for RemoveHook. Not to be called during a forward.
  int AddPreForwardHook(ForwardHook hook);
  int AddPostForwardHook(ForwardHook hook);
  // Removes a hook added to this module; false if the id is unknown.
  bool RemoveHook(int hook_id);
  // True while a hook is registered on this module (not its children): a
  // layer that computes its children's math itself (a packed encoder layer)
  // does so only when none of them is observed.
  bool has_hooks() const;

  // The compute tensor of own weight `local_name` for this forward: the copy
  // a hook holds in `context`, or, with no hook holding one, a copy acquired
  // now and held in `context` until the forward ends. Throws c10::Error if
  // the weight cannot be read.
  const at::Tensor& Param(ForwardContext& context,
                          absl::string_view local_name) const;
  // Param for an optional weight (a bias): undefined tensor if absent.
  at::Tensor OptionalParam(ForwardContext& context,
                           absl::string_view local_name) const;

 private:
  friend class ModuleCall;

  void RunPreHooks(ForwardContext& context) const;
  void RunPostHooks(ForwardContext& context) const;

  const std::string name_;
  const std::string kind_;
  std::map<std::string, std::unique_ptr<casting::Weight>> weights_;
  std::vector<std::unique_ptr<Module>> children_;

  mutable absl::Mutex hooks_mu_;
  std::vector<std::pair<int, ForwardHook>> pre_hooks_
      ABSL_GUARDED_BY(hooks_mu_);
  std::vector<std::pair<int, ForwardHook>> post_hooks_
      ABSL_GUARDED_BY(hooks_mu_);
  int next_hook_id_ ABSL_GUARDED_BY(hooks_mu_) = 0;
};

// Brackets one module's forward: pre-hooks on construction, post-hooks on
// destruction (also when the forward throws). Every layer's forward starts
// with one:
//
//   at::Tensor Linear::Forward(ForwardContext& ctx, const at::Tensor& x) const
//   {
//     ModuleCall call(*this, ctx);
//     return LinearProduct(x, Param(ctx, "weight"), OptionalParam(ctx,
//     "bias"));
//   }
class ModuleCall {
 public:
  ModuleCall(const Module& module, ForwardContext& context);
  ~ModuleCall();
  ModuleCall(const ModuleCall&) = delete;
  ModuleCall& operator=(const ModuleCall&) = delete;

 private:
  const Module& module_;
  ForwardContext& context_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_MODULE_H_
