#include "models/casting_hooks.h"

#include <optional>
#include <string>

#include "casting/memory/tracking_allocator.h"

namespace castserve::models {
namespace {

// True when every weight of `module` has a compute copy or is read from its
// storage by this forward (Module::ComputesFromStorage).
bool NothingToBuild(const Module& module, const ForwardContext& context) {
  for (const auto& [name, weight] : module.weights()) {
    if (!weight->has_compute_copy() &&
        !module.ComputesFromStorage(name, context)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::unique_ptr<CastingHooks> CastingHooks::Attach(Module& root,
                                                   Options options) {
  std::unique_ptr<CastingHooks> hooks(new CastingHooks(options));
  CastingHooks* self = hooks.get();
  std::vector<const Module*> tree_order;
  root.Visit([self, &tree_order](Module& module) {
    if (module.weights().empty()) return;
    tree_order.push_back(&module);
    self->attached_.emplace_back(
        &module, module.AddPreForwardHook(
                     [self](const Module& m, ForwardContext& context) {
                       self->PreForward(m, context);
                     }));
    self->attached_.emplace_back(
        &module, module.AddPostForwardHook(
                     [self](const Module& m, ForwardContext& context) {
                       self->PostForward(m, context);
                     }));
  });
  {
    absl::MutexLock lock(&self->order_mu_);
    SetOrder(std::move(tree_order), self->order_, self->position_);
  }
  if (options.prefetch) {
    self->side_stream_ = std::make_unique<casting::SideStream>(options.device);
    self->prefetch_thread_ = platform::Executor::Default().StartThread(
        [self] { self->PrefetchLoop(); });
  }
  return hooks;
}

CastingHooks::CastingHooks(Options options) : options_(options) {}

CastingHooks::~CastingHooks() { Remove(); }

void CastingHooks::Remove() {
  for (const auto& [module, hook_id] : attached_) module->RemoveHook(hook_id);
  attached_.clear();
  {
    absl::MutexLock lock(&prefetch_mu_);
    stopping_ = true;
    pending_.clear();
  }
  if (prefetch_thread_ != nullptr) prefetch_thread_->Join();
  DropUnclaimedPrefetches();
}

std::vector<const Module*> CastingHooks::execution_order() const {
  absl::MutexLock lock(&order_mu_);
  return order_;
}

int64_t CastingHooks::prefetches_started() const {
  absl::MutexLock lock(&prefetch_mu_);
  return prefetches_started_;
}

PrefetchCounts CastingHooks::prefetch_counts() const {
  absl::MutexLock lock(&prefetch_mu_);
  return prefetch_counts_;
}

void CastingHooks::PreForward(const Module& module, ForwardContext& context) {
  if (options_.prefetch) {
    ClaimPrefetch(module);
    // Device work of the prefetch (this module's or later ones') comes
    // before this module's compute.
    side_stream_->WaitOnCurrentStream();
    bool order_learned = false;
    const Module* next = LearnOrderAndGetNext(module, context, &order_learned);
    if (order_learned) DropStalePrefetches();
    if (next != nullptr) SchedulePrefetch(*next, context);
  }
  if (module.ReadsOwnWeights()) return;
  for (const auto& [name, weight] : module.weights()) {
    // A weight read from its storage needs no compute copy. One that exists
    // (prefetched before the rows were known) is held so that it is
    // released after the module, not left behind; the product still reads
    // the storage (ProductWithWeight).
    if (module.ComputesFromStorage(name, context) &&
        !weight->has_compute_copy()) {
      continue;
    }
    context.Hold(&module, name, AcquireOrThrow(*weight));
  }
}

void CastingHooks::PostForward(const Module& module, ForwardContext& context) {
  context.Release(&module);
}

void CastingHooks::SetOrder(
    std::vector<const Module*> modules, std::vector<const Module*>& order,
    std::unordered_map<const Module*, size_t>& position) {
  order = std::move(modules);
  position.clear();
  for (size_t i = 0; i < order.size(); ++i) position.emplace(order[i], i);
}

const Module* CastingHooks::LearnOrderAndGetNext(const Module& module,
                                                 const ForwardContext& context,
                                                 bool* order_learned) {
  absl::MutexLock lock(&order_mu_);
  if (!order_learned_ &&
      learned_position_.emplace(&module, learned_.size()).second) {
    learned_.push_back(&module);
    if (learned_.size() == order_.size()) {
      SetOrder(std::move(learned_), order_, position_);
      learned_.clear();
      learned_position_.clear();
      order_learned_ = true;
      *order_learned = true;
    }
  }
  auto it = position_.find(&module);
  if (it == position_.end()) return nullptr;
  // Modules with nothing to build (norms read in place, cached copies) are
  // passed over, so the next decode starts as early as it can: when the
  // module before a norm begins, not when the norm does.
  for (size_t next = it->second + 1; next < order_.size(); ++next) {
    if (!PassOver(*order_[next], context)) return order_[next];
  }
  return nullptr;
}

bool CastingHooks::PassOver(const Module& module,
                            const ForwardContext& context) const {
  if (module.ReadsOwnWeights()) return true;
  {
    // Copies that exist because of a prefetch are what this module waits
    // for, not a reason to look further ahead.
    absl::MutexLock lock(&prefetch_mu_);
    if (in_flight_ == &module || unclaimed_.count(&module) > 0) return false;
    for (const PendingPrefetch& pending : pending_) {
      if (pending.module == &module) return false;
    }
  }
  return NothingToBuild(module, context);
}

void CastingHooks::SchedulePrefetch(const Module& module,
                                    const ForwardContext& context) {
  std::vector<casting::Weight*> weights;
  for (const auto& [name, weight] : module.weights()) {
    // A mapped weight is read soon either way: by the decode or the product.
    weight->AdviseWillNeed();
    if (!module.ComputesFromStorage(name, context)) {
      weights.push_back(weight.get());
    }
  }
  absl::MutexLock lock(&prefetch_mu_);
  if (stopping_ || in_flight_ == &module || unclaimed_.count(&module) > 0) {
    return;
  }
  for (const PendingPrefetch& pending : pending_) {
    if (pending.module == &module) return;
  }
  pending_.push_back(
      {&module, std::move(weights), casting::ScopedModelTag::CurrentModelId()});
}

void CastingHooks::ClaimPrefetch(const Module& module) {
  absl::MutexLock lock(&prefetch_mu_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->module == &module) {
      pending_.erase(it);
      ++prefetch_counts_.misses;
      return;
    }
  }
  if (in_flight_ == &module) {
    ++prefetch_counts_.misses;
    auto not_in_flight = [this, &module]() ABSL_SHARED_LOCKS_REQUIRED(
                             prefetch_mu_) { return in_flight_ != &module; };
    prefetch_mu_.Await(absl::Condition(&not_in_flight));
  } else if (unclaimed_.count(&module) > 0) {
    ++prefetch_counts_.hits;
  }
  unclaimed_.erase(&module);
}

void CastingHooks::PrefetchLoop() {
  while (true) {
    PendingPrefetch work;
    {
      absl::MutexLock lock(&prefetch_mu_);
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(prefetch_mu_) {
        return stopping_ || !pending_.empty();
      };
      prefetch_mu_.Await(absl::Condition(&has_work));
      if (stopping_) return;
      work = std::move(pending_.front());
      pending_.pop_front();
      in_flight_ = work.module;
      ++prefetches_started_;
    }
    const Module* module = work.module;
    const std::vector<casting::Weight*> weights = std::move(work.weights);
    {
      // The copies count for the model whose forward asked for them.
      std::optional<casting::ScopedModelTag> tag;
      if (!work.model_id.empty()) tag.emplace(work.model_id);
      // Errors are not lost: the module's own Acquire reports them.
      side_stream_->Run([&weights] {
        for (casting::Weight* weight : weights) {
          (void)weight->PrefetchCompute();
        }
      });
    }
    absl::MutexLock lock(&prefetch_mu_);
    in_flight_ = nullptr;
    unclaimed_.insert(module);
  }
}

void CastingHooks::DropStalePrefetches() {
  {
    absl::MutexLock lock(&prefetch_mu_);
    pending_.clear();
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(prefetch_mu_) {
      return in_flight_ == nullptr;
    };
    prefetch_mu_.Await(absl::Condition(&idle));
  }
  DropUnclaimedPrefetches();
}

void CastingHooks::DropUnclaimedPrefetches() {
  std::unordered_set<const Module*> unclaimed;
  {
    absl::MutexLock lock(&prefetch_mu_);
    unclaimed.swap(unclaimed_);
  }
  // Acquiring finds the prefetched copy; releasing it frees a transient one.
  // Weights without a copy were not prefetched (read from storage).
  for (const Module* module : unclaimed) {
    for (const auto& [name, weight] : module->weights()) {
      if (!weight->has_compute_copy()) continue;
      absl::StatusOr<casting::ComputeHandle> handle = weight->Acquire();
      if (handle.ok()) handle->Reset();
    }
  }
}

}  // namespace castserve::models
