#include "models/module_profiler.h"

#include "casting/memory/tracking_allocator.h"

namespace castserve::models {
namespace {

// One open module call on this thread.
struct OpenCall {
  const void* profiler;
  const Module* module;
  absl::Time start;
  std::unique_ptr<casting::PeakScope> scope;
};

// The calls open on this thread, innermost last, across all profilers.
std::vector<OpenCall>& OpenCalls() {
  thread_local std::vector<OpenCall> calls;
  return calls;
}

}  // namespace

std::unique_ptr<ModuleProfiler> ModuleProfiler::Attach(Module& root) {
  std::unique_ptr<ModuleProfiler> profiler(new ModuleProfiler());
  ModuleProfiler* self = profiler.get();
  root.Visit([self](Module& module) {
    self->attached_.emplace_back(
        &module,
        module.AddPreForwardHook(
            [self](const Module& m, ForwardContext&) { self->PreForward(m); }));
    self->attached_.emplace_back(
        &module,
        module.AddPostForwardHook([self](const Module& m, ForwardContext&) {
          self->PostForward(m);
        }));
  });
  return profiler;
}

ModuleProfiler::~ModuleProfiler() { Remove(); }

void ModuleProfiler::Remove() {
  for (const auto& [module, hook_id] : attached_) module->RemoveHook(hook_id);
  attached_.clear();
}

void ModuleProfiler::PreForward(const Module& module) {
  OpenCalls().push_back(
      {this, &module, absl::Now(), std::make_unique<casting::PeakScope>()});
}

void ModuleProfiler::PostForward(const Module& module) {
  std::vector<OpenCall>& calls = OpenCalls();
  // Post-hooks run in reverse order of pre-hooks, so this module's call is
  // the innermost one of this profiler.
  for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
    if (it->profiler != this || it->module != &module) continue;
    const absl::Duration elapsed = absl::Now() - it->start;
    it->scope->Stop();
    const int64_t increase = it->scope->peak_increase_bytes();
    calls.erase(std::next(it).base());
    absl::MutexLock lock(&mu_);
    ModuleProfile& profile = profiles_[module.name()];
    profile.kind = module.kind();
    ++profile.calls;
    profile.total_time += elapsed;
    profile.max_peak_increase_bytes =
        std::max(profile.max_peak_increase_bytes, increase);
    return;
  }
}

std::map<std::string, ModuleProfile> ModuleProfiler::profiles() const {
  absl::MutexLock lock(&mu_);
  return profiles_;
}

}  // namespace castserve::models
