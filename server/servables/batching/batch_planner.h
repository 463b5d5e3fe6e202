// BatchPlanner: which queued requests the next forward takes, and when it
// may run (dynamic batching's policy, without the queue's locking or
// threads).
//
// Joining (joins): requests whose batch keys equal the oldest's join it,
// oldest first, up to max_batch_size items; one that would overflow is
// passed over for later ones. The batch is ready when full, or when it
// reached a preferred batch size (the largest one formed runs); otherwise it
// waits until the oldest request has waited max_queue_delay. Without
// joining every request runs alone at once.
//
// Immutable after construction; thread-safe.
#ifndef CASTSERVE_SERVER_SERVABLES_BATCHING_BATCH_PLANNER_H_
#define CASTSERVE_SERVER_SERVABLES_BATCHING_BATCH_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/time/time.h"
#include "proto/model_config.pb.h"
#include "server/servables/batching/queued_request.h"

namespace castserve {

// The requests of the next batch: indices into the queue, ascending.
struct BatchPlan {
  std::vector<size_t> indices;
  int64_t items = 0;
  // Runs now (full or preferred); else only once the flush time passed.
  bool ready = false;
};

class BatchPlanner {
 public:
  struct Options {
    int64_t max_batch_size = 0;
    // Whether queued requests may join into one forward.
    bool joins = false;
    // Each in [1, max_batch_size].
    std::vector<int64_t> preferred_batch_sizes;
    absl::Duration max_queue_delay = absl::ZeroDuration();
  };

  // The options of `config`: joins with dynamic_batching and
  // max_batch_size > 1; preferred sizes outside [1, max_batch_size] dropped.
  static Options OptionsFromConfig(const inference::ModelConfig& config);

  explicit BatchPlanner(Options options) : options_(std::move(options)) {}

  const Options& options() const { return options_; }

  // The next batch from `queue` (oldest first; must not be empty).
  BatchPlan Plan(const std::deque<QueuedPtr>& queue) const;
  // When a batch whose oldest request is `oldest` runs even if not ready.
  absl::Time FlushTime(const QueuedRequest& oldest) const {
    return oldest.enqueue_time + options_.max_queue_delay;
  }

 private:
  bool IsPreferred(int64_t items) const;

  const Options options_;
};

}  // namespace castserve

#endif  // CASTSERVE_SERVER_SERVABLES_BATCHING_BATCH_PLANNER_H_
