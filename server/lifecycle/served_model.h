// ServedModel: the servable interface between the model lifecycle (the
// ModelManager, the gRPC service) and model execution. LibTorch-free: the
// layers above it see wire messages, signatures and counters, never tensors.
// The implementation (batching_served_model.h) turns a wire request into
// checked tensors, runs them and writes the wire response.
#ifndef CASTSERVE_SERVER_LIFECYCLE_SERVED_MODEL_H_
#define CASTSERVE_SERVER_LIFECYCLE_SERVED_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "casting/device/device.h"
#include "casting/memory/footprint.h"
#include "casting/memory/weight_tier.h"
#include "models/prefetch_counts.h"
#include "proto/inference.pb.h"
#include "proto/model_config.pb.h"
#include "server/lifecycle/model_statistics_recorder.h"

namespace castserve {

// The platform and backend reported (ModelMetadata, ModelConfig) for a
// model whose config.pbtxt names none (model_config.proto).
inline constexpr char kDefaultPlatform[] = "castserve_torch";
inline constexpr char kDefaultBackend[] = "castserve";

// One input or output of a served model's signature, in wire terms.
// `shape` includes the batch dimension first; -1 marks a variable dimension.
struct TensorSpec {
  std::string name;
  // The wire datatype string: "FP32", "INT64", ...
  std::string datatype;
  std::vector<int64_t> shape;
  // Inputs only: a request may leave it out.
  bool optional = false;
};

// One inference call as it came over the wire. `request` and `response`
// are not owned and must stay alive until the call's `done` has run.
struct InferenceCall {
  const inference::ModelInferRequest* request = nullptr;
  // Filled (model name, version, id, outputs) when the call succeeds.
  inference::ModelInferResponse* response = nullptr;
  // The call fails with DEADLINE_EXCEEDED, also while queued, after this.
  absl::Time deadline = absl::InfiniteFuture();
  // Polled while queued and before running; true drops the call with
  // CANCELLED. May be null.
  std::function<bool()> is_cancelled;
  // A response larger than this fails the call with RESOURCE_EXHAUSTED
  // (and counts as that failure).
  int64_t max_response_bytes = std::numeric_limits<int64_t>::max();
  // Null for a unary call. A decoupled model (model_transaction_policy
  // decoupled: a generation model) calls it with every response before the
  // final one, in order, never blocking on it; the final response is
  // written into `response` before `done` runs. Other models never call it.
  std::function<void(inference::ModelInferResponse)> partial_response;
};

// The weight copies a model made since it was loaded (casting::Weight's
// activity, summed), and how its prefetches turned out.
struct WeightCopyActivity {
  int64_t materializations = 0;
  int64_t bytes = 0;
  absl::Duration time;
};
struct ServedModelActivity {
  WeightCopyActivity storage;  // Resident copies in the storage format.
  WeightCopyActivity compute;  // Decoded compute copies.
  // The part of compute.bytes made as transient copies (freed after use).
  int64_t transient_compute_bytes = 0;
  models::PrefetchCounts prefetch;
  // Generation models only (absent for the others): the KV-cache pool's
  // bytes held by sequences now, and the most since load; prefix caching's
  // prompt tokens reused from cached blocks (hits) and computed (misses)
  // since load, and the bytes of cached blocks no sequence holds now.
  struct KvCache {
    int64_t bytes = 0;
    int64_t peak_bytes = 0;
    int64_t prefix_hit_tokens = 0;
    int64_t prefix_miss_tokens = 0;
    int64_t prefix_cached_bytes = 0;
  };
  std::optional<KvCache> kv_cache;
  // The tracking allocator's peak for the model since it was loaded; 0
  // without a tracking allocator.
  int64_t peak_tracked_bytes = 0;
  // The model's peak on its CUDA device since it was loaded
  // (casting/memory/device_model_memory.h); 0 on the CPU.
  int64_t peak_device_bytes = 0;
};

// One entry of the ModelStatistics RPC's memory_usage: a kind of memory
// ("CPU", "GPU"), the device's index, the model's bytes there.
struct MemoryUsageEntry {
  std::string type;
  int64_t id = 0;
  int64_t bytes = 0;
};

// A loaded model as the lifecycle and the frontends see it. All methods are
// thread-safe.
class ServedModel {
 public:
  virtual ~ServedModel() = default;

  // The effective configuration: the model's config.pbtxt with inputs and
  // outputs filled in from the architecture's signature when left empty.
  virtual const inference::ModelConfig& config() const = 0;
  virtual const std::vector<TensorSpec>& inputs() const = 0;
  virtual const std::vector<TensorSpec>& outputs() const = 0;

  // Validates `call.request` completely against the signature and the
  // model's limits (INVALID_ARGUMENT naming the tensor), queues it, runs it
  // and writes `call.response`. `done` runs exactly once, on a worker thread
  // or inline when the call is refused at once (invalid, queue full ->
  // RESOURCE_EXHAUSTED, server stopping -> UNAVAILABLE). Every call counts
  // once in statistics(), as a success or as the failure `done` reports.
  virtual void Infer(InferenceCall call,
                     std::function<void(absl::Status)> done) = 0;

  // Requests queued or running now.
  virtual int64_t pending_requests() const = 0;
  // What the ModelStatistics RPC and the Prometheus collector both read.
  virtual ServedModelStatistics statistics() const = 0;
  // Memory of the model's weights by state, now.
  virtual casting::Footprint footprint() const = 0;
  // Bytes attributed to this model now: the tracking allocator's (CPU)
  // plus device_bytes(). What the memory budget measures.
  virtual int64_t tracked_bytes() const = 0;
  // The device the model's weights and forwards are on.
  virtual casting::Device device() const { return casting::Device::Cpu(); }
  // The part of tracked_bytes() on device() when it is a CUDA device
  // (casting/memory/device_model_memory.h); 0 on the CPU.
  virtual int64_t device_bytes() const { return 0; }
  // Weight copies and prefetches since load; zeros where not measured.
  virtual ServedModelActivity activity() const { return {}; }
  // The bytes the model holds, measured: what the ModelManager's budget
  // counts. The tracking allocator sees what was allocated under the
  // model's tag (weights made at load or by a forward, activations); the
  // footprint sees the weights' own copies wherever they were made (also on
  // a prefetch thread). The two overlap, so the larger one counts, never
  // their sum.
  int64_t measured_bytes() const {
    return std::max(tracked_bytes(), footprint().owned_bytes());
  }
  // The model's memory by kind of device, as the ModelStatistics RPC reports
  // it. The servable decides (it knows its device); this default is one CPU
  // entry of measured_bytes().
  virtual std::vector<MemoryUsageEntry> memory_usage() const {
    return {{"CPU", 0, measured_bytes()}};
  }

  // Memory tiers (casting/memory/weight_tier.h). The tier the model was
  // last moved to; kHot for a model that never moved.
  virtual casting::WeightTier tier() const { return casting::WeightTier::kHot; }
  // Moving down frees what `tier` keeps no longer (models::Model::Demote:
  // waits for the forwards running now, bounded by theirs; a generation
  // model keeps the KV blocks of its running sequences). Moving up only
  // marks the model: its next forward builds back, layer by layer, what its
  // policy configures. The ModelManager decides the moves and accounts for
  // them; this default (a model without tiers) only succeeds.
  // With `released` not null, what a move down took out of the weights is
  // freed when the last reference to `*released` goes, not before MoveTo
  // returns: freeing a large model's pages takes longer than taking them
  // out, and the ModelManager lets the model's requests in meanwhile.
  virtual absl::Status MoveTo(casting::WeightTier tier,
                              std::shared_ptr<const void>* released) {
    return absl::OkStatus();
  }
  absl::Status MoveTo(casting::WeightTier tier) {
    return MoveTo(tier, nullptr);
  }
  // The model's last promotion that ran to its end (a move up: building back
  // what `to` keeps from `from`), and how long building back took; `count`
  // goes up by one with each. The ModelManager learns from it how fast the
  // model wakes (tier_policy.h, WakeRates). This default: none yet.
  struct PromotionTiming {
    casting::WeightTier from = casting::WeightTier::kHot;
    casting::WeightTier to = casting::WeightTier::kHot;
    absl::Duration took;
    // What the promotion built itself (models::Model::Promote): not what
    // the wake request's forward built beside it.
    int64_t bytes = 0;
    int64_t count = 0;
  };
  virtual PromotionTiming last_promotion() const { return {}; }
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_LIFECYCLE_SERVED_MODEL_H_
