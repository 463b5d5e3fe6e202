#include "models/module.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace castserve::models {

StatusError::StatusError(absl::Status status)
    : c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__},
                 std::string(status.message())),
      status_(std::move(status)) {}

WeightUnavailableError::WeightUnavailableError(absl::string_view weight_name,
                                               const absl::Status& status)
    : StatusError(absl::Status(
          status.code(),
          absl::StrCat("weight '", weight_name, "': ", status.message()))) {}

casting::ComputeHandle AcquireOrThrow(casting::Weight& weight) {
  absl::StatusOr<casting::ComputeHandle> handle = weight.Acquire();
  if (!handle.ok())
    throw WeightUnavailableError(weight.name(), handle.status());
  return *std::move(handle);
}

void ForwardContext::Hold(const Module* module, absl::string_view local_name,
                          casting::ComputeHandle handle) {
  held_[module][std::string(local_name)] = std::move(handle);
}

const at::Tensor* ForwardContext::Find(const Module* module,
                                       absl::string_view local_name) const {
  auto by_module = held_.find(module);
  if (by_module == held_.end()) return nullptr;
  auto by_name = by_module->second.find(std::string(local_name));
  if (by_name == by_module->second.end()) return nullptr;
  return &by_name->second.tensor();
}

void ForwardContext::Release(const Module* module) { held_.erase(module); }

Module::Module(std::string name, std::string kind)
    : name_(std::move(name)), kind_(std::move(kind)) {}

Module::~Module() = default;

void Module::AddWeight(std::string local_name,
                       std::unique_ptr<casting::Weight> weight) {
  weights_[std::move(local_name)] = std::move(weight);
}

casting::Weight* Module::weight(absl::string_view local_name) const {
  auto it = weights_.find(std::string(local_name));
  return it == weights_.end() ? nullptr : it->second.get();
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> children;
  children.reserve(children_.size());
  for (const auto& child : children_) children.push_back(child.get());
  return children;
}

void Module::Visit(const std::function<void(Module&)>& visit) {
  visit(*this);
  for (const auto& child : children_) child->Visit(visit);
}

int Module::AddPreForwardHook(ForwardHook hook) {
  absl::MutexLock lock(&hooks_mu_);
  pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

int Module::AddPostForwardHook(ForwardHook hook) {
  absl::MutexLock lock(&hooks_mu_);
  post_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

bool Module::RemoveHook(int hook_id) {
  absl::MutexLock lock(&hooks_mu_);
  for (auto* hooks : {&pre_hooks_, &post_hooks_}) {
    auto it =
        std::find_if(hooks->begin(), hooks->end(),
                     [&](const auto& entry) { return entry.first == hook_id; });
    if (it != hooks->end()) {
      hooks->erase(it);
      return true;
    }
  }
  return false;
}

bool Module::has_hooks() const {
  absl::MutexLock lock(&hooks_mu_);
  return !pre_hooks_.empty() || !post_hooks_.empty();
}

void Module::RunPreHooks(ForwardContext& context) const {
  std::vector<std::pair<int, ForwardHook>> hooks;
  {
    absl::MutexLock lock(&hooks_mu_);
    hooks = pre_hooks_;
  }
  for (const auto& [id, hook] : hooks) hook(*this, context);
}

void Module::RunPostHooks(ForwardContext& context) const {
  std::vector<std::pair<int, ForwardHook>> hooks;
  {
    absl::MutexLock lock(&hooks_mu_);
    hooks = post_hooks_;
  }
  for (auto it = hooks.rbegin(); it != hooks.rend(); ++it) {
    it->second(*this, context);
  }
}

const at::Tensor& Module::Param(ForwardContext& context,
                                absl::string_view local_name) const {
  if (const at::Tensor* held = context.Find(this, local_name)) return *held;
  casting::Weight* own = weight(local_name);
  TORCH_CHECK(own != nullptr, "module '", name_, "' (", kind_,
              ") has no weight '", std::string(local_name), "'");
  context.Hold(this, local_name, AcquireOrThrow(*own));
  return *context.Find(this, local_name);
}

at::Tensor Module::OptionalParam(ForwardContext& context,
                                 absl::string_view local_name) const {
  if (weight(local_name) == nullptr) return at::Tensor();
  return Param(context, local_name);
}

void ForwardContext::ThrowIfCancelled(const Module& module) const {
  if (cancellation_ == nullptr || !cancellation_->cancelled()) return;
  throw StatusError(absl::CancelledError(
      absl::StrCat("forward cancelled before module '", module.name(),
                   "': ", cancellation_->reason())));
}

ModuleCall::ModuleCall(const Module& module, ForwardContext& context)
    : module_(module), context_(context) {
  context_.ThrowIfCancelled(module_);
  module_.RunPreHooks(context_);
}

ModuleCall::~ModuleCall() { module_.RunPostHooks(context_); }

}  // namespace castserve::models
