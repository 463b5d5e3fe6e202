// A ModelManager over a SizedModelFactory and a repository of config.pbtxt
// files in a temporary folder, for the manager's tests: the options a test
// sets before the first manager() call, and what the manager counted.
#ifndef CASTSERVE_SERVER_TEST_UTIL_MODEL_MANAGER_FIXTURE_H_
#define CASTSERVE_SERVER_TEST_UTIL_MODEL_MANAGER_FIXTURE_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "platform/clock.h"
#include "platform/executor.h"
#include "server/lifecycle/model_manager.h"
#include "server/lifecycle/model_repository.h"
#include "server/test_util/sized_model_factory.h"

namespace castserve::testing {

namespace fs = std::filesystem;

class ModelManagerFixture {
 public:
  explicit ModelManagerFixture(int64_t budget_bytes = 0) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    static std::atomic<int> serial{0};
    root_ = fs::path(tmp != nullptr ? tmp : "/tmp") /
            absl::StrCat("manager_repo_", ::getpid(), "_", serial++);
    fs::remove_all(root_);
    fs::create_directories(root_);
    budget_bytes_ = budget_bytes;
  }
  ~ModelManagerFixture() { fs::remove_all(root_); }

  void AddModel(const std::string& name, const std::string& config_text) {
    fs::create_directories(root_ / name);
    std::ofstream(root_ / name / "config.pbtxt") << config_text;
  }

  // Made on first use, after the test added its models. Not thread-safe:
  // call it once before starting threads that use it.
  ModelManager& manager() {
    if (manager_ == nullptr) {
      repository_ = *ModelRepository::Open(root_.string());
      ModelManagerOptions options;
      options.repository = repository_.get();
      options.factory = &factory_;
      options.memory_budget_bytes = budget_bytes_;
      options.executor = executor_;
      options.clock = clock_;
      options.max_wait_for_memory = max_wait_for_memory_;
      options.max_unload_drain = max_unload_drain_;
      options.memory_tiers = memory_tiers_;
      options.keep_alive = keep_alive_;
      options.on_accounted_bytes = [this](int64_t bytes) {
        absl::MutexLock lock(&accounted_mu_);
        most_accounted_bytes_ = std::max(most_accounted_bytes_, bytes);
        accounted_bytes_ = bytes;
        ++accounting_notes_;
      };
      manager_ = *ModelManager::Create(std::move(options));
    }
    return *manager_;
  }
  // Before manager(): the executor the manager's background loads run on.
  void set_executor(platform::Executor* executor) { executor_ = executor; }
  // Before manager(): the clock last-use times and deadlines read.
  void set_clock(platform::Clock* clock) { clock_ = clock; }
  // Before manager(): how long explicit loads wait for memory.
  void set_max_wait_for_memory(absl::Duration wait) {
    max_wait_for_memory_ = wait;
  }
  // Before manager(): how long an unload waits for in-flight requests.
  void set_max_unload_drain(absl::Duration drain) { max_unload_drain_ = drain; }
  // Before manager(): ModelManagerOptions' memory_tiers and keep_alive.
  void set_memory_tiers(bool on) { memory_tiers_ = on; }
  void set_keep_alive(absl::Duration keep_alive) { keep_alive_ = keep_alive; }
  SizedModelFactory& factory() { return factory_; }
  // The most the manager counted against the budget at any change.
  int64_t most_accounted_bytes() {
    absl::MutexLock lock(&accounted_mu_);
    return most_accounted_bytes_;
  }
  // What the manager counted at its last change.
  int64_t accounted_bytes() {
    absl::MutexLock lock(&accounted_mu_);
    return accounted_bytes_;
  }
  int accounting_notes() {
    absl::MutexLock lock(&accounted_mu_);
    return accounting_notes_;
  }
  // Returns once `name`'s reason contains `text` (false after 10 s).
  bool AwaitReason(const std::string& name, const std::string& text) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (ReasonOf(name).find(text) == std::string::npos) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  ModelState StateOf(const std::string& name) {
    absl::StatusOr<ModelStatus> status = manager().Status(name);
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->state : ModelState::kUnavailable;
  }
  std::string ReasonOf(const std::string& name) {
    absl::StatusOr<ModelStatus> status = manager().Status(name);
    return status.ok() ? status->reason : "";
  }

 private:
  fs::path root_;
  int64_t budget_bytes_ = 0;
  platform::Executor* executor_ = nullptr;
  platform::Clock* clock_ = &platform::Clock::Real();
  absl::Duration max_wait_for_memory_ = absl::Minutes(1);
  absl::Duration max_unload_drain_ = absl::Minutes(5);
  bool memory_tiers_ = true;
  absl::Duration keep_alive_ = absl::InfiniteDuration();
  SizedModelFactory factory_;
  absl::Mutex accounted_mu_;
  int64_t most_accounted_bytes_ ABSL_GUARDED_BY(accounted_mu_) = 0;
  int64_t accounted_bytes_ ABSL_GUARDED_BY(accounted_mu_) = 0;
  int accounting_notes_ ABSL_GUARDED_BY(accounted_mu_) = 0;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<ModelManager> manager_;
};

}  // namespace castserve::testing

#endif  // CASTSERVE_SERVER_TEST_UTIL_MODEL_MANAGER_FIXTURE_H_
