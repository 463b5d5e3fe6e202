#include "server/servables/generation/scheduler_generation_engine.h"

#include <utility>

namespace castserve {
namespace {

class SchedulerEngine final : public GenerationEngine {
 public:
  explicit SchedulerEngine(
      std::unique_ptr<models::GenerationScheduler> scheduler)
      : scheduler_(std::move(scheduler)) {}

  void Submit(models::SequenceRequest request) override {
    scheduler_->Submit(std::move(request));
  }
  void Stop() override { scheduler_->Stop(); }
  models::SchedulerStats stats() const override { return scheduler_->stats(); }
  void KeepUnheldBlocks(bool keep) override {
    scheduler_->KeepUnheldBlocks(keep);
  }

 private:
  const std::unique_ptr<models::GenerationScheduler> scheduler_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GenerationEngine>> CreateSchedulerEngine(
    const models::Model& model, const models::SchedulerOptions& options) {
  absl::StatusOr<std::unique_ptr<models::GenerationScheduler>> scheduler =
      models::GenerationScheduler::Create(model, options);
  if (!scheduler.ok()) return scheduler.status();
  return std::make_unique<SchedulerEngine>(*std::move(scheduler));
}

}  // namespace castserve
