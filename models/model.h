// A servable model: a module tree plus a signature, run one forward at a
// time per call (calls may run concurrently; each gets its own context).
#ifndef CASTSERVE_MODELS_MODEL_H_
#define CASTSERVE_MODELS_MODEL_H_

#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "c10/util/Exception.h"
#include "casting/device/device.h"
#include "casting/memory/weight_tier.h"
#include "models/module.h"
#include "models/prefetch_counts.h"

namespace castserve::models {

// One input or output of a signature. `shape` includes the batch dimension
// first; -1 marks a variable dimension.
struct TensorSpec {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  // Inputs only: a request may leave it out.
  bool optional = false;
};

using NamedTensors = std::map<std::string, at::Tensor>;

class Model;
class IncrementalDecoder;  // models/generation/incremental_decoder.h

// Inputs a model accepted: their names, dtypes and shapes match its
// signature and they are within its limits (vocabulary, position table).
// Made only by Model::CheckInputs and Model::CheckLimits (and Join, from
// checked parts), so that a forward never re-checks what its caller checked.
// A value; immutable.
class CheckedInputs {
 public:
  const NamedTensors& tensors() const { return tensors_; }
  // The model whose checks these inputs passed.
  const Model& model() const { return *model_; }

  // The parts concatenated along dimension 0: the inputs of one batch.
  // The parts must be checked by the same model and agree on names, dtypes
  // and every dimension but the first (asserted: a caller that joins
  // anything else is wrong). May throw c10::Error when out of memory.
  static CheckedInputs Join(const std::vector<const CheckedInputs*>& parts);

 private:
  friend class Model;
  CheckedInputs(const Model* model, NamedTensors tensors)
      : model_(model), tensors_(std::move(tensors)) {}

  const Model* model_;
  NamedTensors tensors_;
};

// The Status for a c10::Error thrown by a forward, as Model::Forward maps it.
absl::Status StatusFromTorchError(const c10::Error& error);

// Runs `fn`, which returns absl::Status or absl::StatusOr<T>; an exception
// it throws becomes an error of that type instead of leaving castserve's
// code: c10::Error as StatusFromTorchError, std::bad_alloc
// RESOURCE_EXHAUSTED, any other std::exception INTERNAL with its message.
// Every entry into LibTorch from a daemon thread (forwards, loads, warmups,
// batch assembly) runs under it, so no exception ends a thread.
template <typename Fn>
auto CatchExceptions(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& error) {
    return StatusFromTorchError(error);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory");
  } catch (const std::exception& error) {
    return absl::InternalError(error.what());
  }
}

class Model {
 public:
  virtual ~Model() = default;

  // "bert", "llama", "siglip_vision_model", ...
  virtual std::string architecture() const = 0;
  virtual const std::vector<TensorSpec>& inputs() const = 0;
  virtual const std::vector<TensorSpec>& outputs() const = 0;
  virtual Module& root() = 0;

  // Where the model's weights, buffers and forward live (the weight policy's
  // device, models/loading/weight_policy.h). Architectures built on another
  // device than the CPU override it.
  virtual casting::Device device() const { return casting::Device::Cpu(); }

  // The one check of in-process tensors (warmups, benchmarks, fuzzers,
  // tests) against the signature and the model's limits (dtype, rank,
  // dimensions, token ids outside the vocabulary, sequences longer than the
  // position table): InvalidArgument naming the input. Thread-safe.
  absl::StatusOr<CheckedInputs> CheckInputs(NamedTensors inputs) const;

  // For inputs whose names, dtypes and shapes were checked against inputs()
  // where they entered (the wire request's validation,
  // server/servables/tensor_conversion.h): checks only the model's limits. The
  // signature is asserted, not re-checked (TORCH_INTERNAL_ASSERT: a
  // mismatch here is castserve's bug). Thread-safe.
  absl::StatusOr<CheckedInputs> CheckLimits(NamedTensors inputs) const;

  // Runs one forward of `inputs` (checked by this model: asserted) under
  // at::InferenceMode and returns every output. Inputs are copied to
  // device() (on the calling thread's current stream: the one place a
  // model's forward is ordered, and the hook for attributing its device
  // work) and outputs come back in host memory.
  //
  // The one place where c10::Error becomes a Status: out of memory ->
  // RESOURCE_EXHAUSTED, bad value/type/index -> INVALID_ARGUMENT, not
  // implemented -> UNIMPLEMENTED, a weight whose file vanished -> DATA_LOSS,
  // a cancelled forward -> CANCELLED, anything else -> INTERNAL.
  // `cancellation` (may be null) stops the forward at the next module
  // boundary once set. Thread-safe.
  absl::StatusOr<NamedTensors> Run(
      const CheckedInputs& inputs,
      const Cancellation* cancellation = nullptr) const;

  // CheckInputs, then Run.
  absl::StatusOr<NamedTensors> Forward(
      const NamedTensors& inputs,
      const Cancellation* cancellation = nullptr) const;

  // How the prefetches of its casting hooks turned out; zeros for a model
  // without prefetch. Thread-safe.
  virtual PrefetchCounts prefetch_counts() const { return {}; }

  // The most tokens one sequence of input_ids may have (the position table,
  // or a sentence-transformers max_seq_length below it): where text is
  // truncated. nullopt for a model without a token limit or token inputs.
  virtual std::optional<int64_t> max_sequence_length() const {
    return std::nullopt;
  }

  // Decoder-only language models: incremental decoding over a KV cache
  // (models/generation/generation.h uses it); owned by the model. nullptr for
  // the other architectures.
  virtual const IncrementalDecoder* incremental_decoder() const {
    return nullptr;
  }

  // The names of the last dimension of a classifier's `scores` output
  // (config.json's id2label), in label order; empty for other models.
  virtual std::vector<std::string> output_labels() const { return {}; }

  // Memory tiers (casting/memory/weight_tier.h): frees what `tier` keeps no
  // longer in every weight of the model (casting::Weight::Demote), once the
  // forwards running now have ended. Forwards that start meanwhile wait
  // only while it takes the memory out of the weights, not while it frees
  // it: that happens after they are let in, before Demote returns, or, with
  // `released`, when the caller destroys it. Later forwards build back,
  // layer by layer, what the weight policy configures, bitwise the same.
  // Thread-safe.
  absl::Status Demote(casting::WeightTier tier,
                      casting::ReleasedMemory* released = nullptr);

  // Builds back what `tier` keeps in every weight (casting::Weight::Promote),
  // one weight at a time from the model's last to its first (a forward
  // running meanwhile meets it once), while forwards run: a forward
  // waits only for the weight being promoted, if it needs that one, and a
  // Demote for one weight's promotion. Stops before the next weight once
  // `cancelled` returns true, with what it built kept (the rest is built on
  // first use, as before). `cancelled` is asked before each weight, with
  // nothing held. The first error ends it. With `built_bytes`, adds what the
  // promotion itself built to it: resident storage and cached copies a
  // weight did not hold before its promotion (not what forwards built
  // meanwhile, nor modules' derived copies, which forwards build).
  // Thread-safe.
  absl::Status Promote(casting::WeightTier tier,
                       const std::function<bool()>& cancelled,
                       int64_t* built_bytes = nullptr);

  // Holds Demote off while it lives. Every forward holds one: Run does;
  // code that drives incremental_decoder() itself (the generation
  // scheduler) holds one per step. Shared: passes never wait for each
  // other, only for a Demote.
  class ForwardPass {
   public:
    explicit ForwardPass(absl::Mutex* gate) ABSL_SHARED_LOCK_FUNCTION(gate)
        : gate_(gate) {
      gate_->ReaderLock();
    }
    ~ForwardPass() ABSL_UNLOCK_FUNCTION() { gate_->ReaderUnlock(); }
    ForwardPass(const ForwardPass&) = delete;
    ForwardPass& operator=(const ForwardPass&) = delete;

   private:
    absl::Mutex* const gate_;
  };
  ForwardPass EnterForward() const { return ForwardPass(&forward_gate_); }

  // What the loader says once about how this model's weights are kept, for
  // the load log line and the served config's parameters: a pre-quantized
  // checkpoint's note (models/loading/prequantized_weights.h); empty otherwise.
  // Set by LoadHfModel before the model is shared; then read-only.
  const std::string& storage_note() const { return storage_note_; }
  void set_storage_note(std::string note) { storage_note_ = std::move(note); }

 protected:
  // For models that wrap another one (model_loader.cc): the wrapped model's
  // hooks, reachable from a derived class.
  static absl::Status ValidateInputsOf(const Model& model,
                                       const NamedTensors& inputs) {
    return model.ValidateInputs(inputs);
  }
  static NamedTensors ForwardImplOf(const Model& model, ForwardContext& context,
                                    const NamedTensors& inputs) {
    return model.ForwardImpl(context, inputs);
  }

  // Architecture-specific checks beyond names, dtypes and ranks (vocabulary,
  // position table). Called by CheckInputs and CheckLimits.
  virtual absl::Status ValidateInputs(const NamedTensors& inputs) const {
    return absl::OkStatus();
  }
  // The forward itself; may throw c10::Error.
  virtual NamedTensors ForwardImpl(ForwardContext& context,
                                   const NamedTensors& inputs) const = 0;

 private:
  std::string storage_note_;
  // Forwards hold it shared (ForwardPass), Demote exclusively.
  mutable absl::Mutex forward_gate_;
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_MODEL_H_
