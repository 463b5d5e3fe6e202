// ModuleProfiler: per-module timing and memory scopes, attached to a module
// tree as forward hooks (like CastingHooks, and beside them).
//
// For every module of the tree: the pre-forward hook starts a clock and a
// casting::PeakScope; the post-forward hook stops them and adds to the
// module's totals: calls, seconds, and the largest increase of the CPU
// tracking allocator's live bytes seen during one call (what that module's
// forward needed beyond what was live when it started, its children's work
// included). Without the tracking allocator installed, peaks read 0.
//
// Nested modules run on the forward's thread, so each thread keeps its own
// stack of open scopes. Forwards may run concurrently (the totals are
// mutex-guarded); Attach and Remove must not race with a forward.
#ifndef CASTSERVE_MODELS_MODULE_PROFILER_H_
#define CASTSERVE_MODELS_MODULE_PROFILER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/module.h"

namespace castserve::models {

struct ModuleProfile {
  std::string kind;
  int64_t calls = 0;
  absl::Duration total_time;
  // Largest peak-over-start of the tracked CPU bytes during one call.
  int64_t max_peak_increase_bytes = 0;
};

class ModuleProfiler {
 public:
  // Attaches to `root` and every descendant. The tree must outlive the
  // profiler.
  static std::unique_ptr<ModuleProfiler> Attach(Module& root);
  ~ModuleProfiler();
  ModuleProfiler(const ModuleProfiler&) = delete;
  ModuleProfiler& operator=(const ModuleProfiler&) = delete;

  // Detaches every hook. Idempotent.
  void Remove();

  // Totals by module name, for the calls finished so far.
  std::map<std::string, ModuleProfile> profiles() const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ModuleProfiler() = default;

  void PreForward(const Module& module);
  void PostForward(const Module& module);

  std::vector<std::pair<Module*, int>> attached_;  // Module, hook id.
  mutable absl::Mutex mu_;
  std::map<std::string, ModuleProfile> profiles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace castserve::models

#endif  // CASTSERVE_MODELS_MODULE_PROFILER_H_
