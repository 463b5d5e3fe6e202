#include "server/servables/batching/batch_planner.h"

#include <algorithm>

namespace castserve {

BatchPlanner::Options BatchPlanner::OptionsFromConfig(
    const inference::ModelConfig& config) {
  Options options;
  options.max_batch_size = config.max_batch_size();
  options.joins = config.has_dynamic_batching() && options.max_batch_size > 1;
  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  for (int32_t size : batching.preferred_batch_size()) {
    if (size > 0 && size <= options.max_batch_size) {
      options.preferred_batch_sizes.push_back(size);
    }
  }
  options.max_queue_delay =
      absl::Microseconds(batching.max_queue_delay_microseconds());
  return options;
}

bool BatchPlanner::IsPreferred(int64_t items) const {
  const std::vector<int64_t>& sizes = options_.preferred_batch_sizes;
  return std::find(sizes.begin(), sizes.end(), items) != sizes.end();
}

BatchPlan BatchPlanner::Plan(const std::deque<QueuedPtr>& queue) const {
  BatchPlan plan;
  const QueuedRequest& oldest = *queue.front();
  plan.indices.push_back(0);
  plan.items = oldest.batch_size;
  if (!options_.joins) {
    plan.ready = true;
    return plan;
  }
  BatchPlan preferred;
  if (IsPreferred(plan.items)) preferred = plan;
  for (size_t i = 1; i < queue.size() && plan.items < options_.max_batch_size;
       ++i) {
    const QueuedRequest& candidate = *queue[i];
    if (candidate.batch_key != oldest.batch_key ||
        plan.items + candidate.batch_size > options_.max_batch_size) {
      continue;
    }
    plan.indices.push_back(i);
    plan.items += candidate.batch_size;
    if (IsPreferred(plan.items)) preferred = plan;
  }
  if (plan.items >= options_.max_batch_size) {
    plan.ready = true;
    return plan;
  }
  // The largest preferred size formed runs now; otherwise wait for more
  // requests until the oldest has waited max_queue_delay.
  if (!preferred.indices.empty()) {
    preferred.ready = true;
    return preferred;
  }
  return plan;
}

}  // namespace castserve
