#include "casting/memory/tracking_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

// LibTorch 2.3 made Allocator::allocate non-const and added the pure virtual
// copy_data.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define CASTSERVE_TORCH_ALLOCATE_IS_CONST 0
#else
#define CASTSERVE_TORCH_ALLOCATE_IS_CONST 1
#endif

namespace castserve::casting {
namespace internal {

// One model's counters. Reference-counted: one reference from the registry
// while registered, one per live attributed allocation, one per active
// ScopedModelTag, so frees after unregistration still find them.
struct ModelCounters {
  explicit ModelCounters(std::string model_id) : id(std::move(model_id)) {}

  const std::string id;
  std::atomic<int64_t> live_bytes{0};
  std::atomic<int64_t> peak_bytes{0};
  std::atomic<int64_t> refs{1};
};

}  // namespace internal

namespace {

using internal::ModelCounters;

constexpr uint8_t kInstallPriority = 1;  // Above c10's default CPU allocator.
constexpr uint64_t kHeaderMagic = 0x63617374'7365727Full;  // "castser" + v.

// Written in front of each tracked allocation's data.
struct AllocationHeader {
  uint64_t magic;
  int64_t size_bytes;
  ModelCounters* model;  // Null when no tag was set.
};

// Keeps the data c10::gAlignment-aligned, as c10's default allocator does.
constexpr size_t kHeaderBytes =
    (sizeof(AllocationHeader) + c10::gAlignment - 1) / c10::gAlignment *
    c10::gAlignment;

std::atomic<TrackingAllocator*> g_installed{nullptr};
thread_local ModelCounters* tls_model = nullptr;

void RaiseTo(std::atomic<int64_t>& peak, int64_t value) {
  int64_t current = peak.load(std::memory_order_relaxed);
  while (current < value && !peak.compare_exchange_weak(
                                current, value, std::memory_order_relaxed)) {
  }
}

void Ref(ModelCounters* model) {
  if (model != nullptr) model->refs.fetch_add(1, std::memory_order_relaxed);
}

void Unref(ModelCounters* model) {
  if (model != nullptr &&
      model->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete model;
  }
}

}  // namespace

// The c10::Allocator LibTorch calls. data == context, so the raw interface
// (raw_allocate / raw_deleter) works too.
class TrackingAllocator::Adapter final : public c10::Allocator {
 public:
  explicit Adapter(TrackingAllocator* owner) : owner_(owner) {}

#if CASTSERVE_TORCH_ALLOCATE_IS_CONST
  c10::DataPtr allocate(size_t n) const override { return Allocate(n); }
#else
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  c10::DeleterFnPtr raw_deleter() const override { return &Free; }

 private:
  c10::DataPtr Allocate(size_t n) const;
  static void Free(void* data);

  TrackingAllocator* const owner_;
};

c10::DataPtr TrackingAllocator::Adapter::Allocate(size_t n) const {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n == 0) return c10::DataPtr(nullptr, nullptr, &Free, cpu);
  TORCH_CHECK(n <= static_cast<size_t>(std::numeric_limits<int64_t>::max()) -
                       kHeaderBytes,
              "CPU allocation of ", n, " bytes is too large");
  // alloc_cpu throws c10::Error when out of memory.
  auto* base = static_cast<char*>(c10::alloc_cpu(n + kHeaderBytes));
  ModelCounters* model = tls_model;
  auto* header = reinterpret_cast<AllocationHeader*>(base);
  header->magic = kHeaderMagic;
  header->size_bytes = static_cast<int64_t>(n);
  header->model = model;
  owner_->OnAllocate(header->size_bytes, model);
  void* data = base + kHeaderBytes;
  return c10::DataPtr(data, data, &Free, cpu);
}

void TrackingAllocator::Adapter::Free(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeaderBytes;
  auto* header = reinterpret_cast<AllocationHeader*>(base);
  TORCH_INTERNAL_ASSERT(header->magic == kHeaderMagic,
                        "freeing a pointer the tracking allocator did not "
                        "allocate, or freeing it twice");
  header->magic = 0;
  g_installed.load(std::memory_order_acquire)
      ->OnFree(header->size_bytes, header->model);
  c10::free_cpu(base);
}

absl::StatusOr<TrackingAllocator*>
TrackingAllocator::InstallTrackingCpuAllocator() {
  // Function-local static: thread-safe, runs once, never destroyed.
  static TrackingAllocator* const installed = [] {
    auto* allocator = new TrackingAllocator();
    g_installed.store(allocator, std::memory_order_release);
    c10::SetCPUAllocator(allocator->adapter_, kInstallPriority);
    return allocator;
  }();
  if (c10::GetCPUAllocator() != installed->adapter_) {
    return absl::FailedPreconditionError(
        "another CPU allocator with a higher priority is installed; memory "
        "tracking is off");
  }
  return installed;
}

TrackingAllocator* TrackingAllocator::Installed() {
  return g_installed.load(std::memory_order_acquire);
}

TrackingAllocator::TrackingAllocator() : adapter_(new Adapter(this)) {}

int64_t TrackingAllocator::AllocatedBytes() const {
  return live_bytes_.load(std::memory_order_relaxed);
}

int64_t TrackingAllocator::PeakAllocatedBytes() const {
  return peak_bytes_.load(std::memory_order_relaxed);
}

void TrackingAllocator::ResetPeak() {
  // A concurrent allocation may raise it again right away, as it should.
  peak_bytes_.store(live_bytes_.load(std::memory_order_relaxed),
                    std::memory_order_relaxed);
}

int64_t TrackingAllocator::LiveAllocations() const {
  return live_allocations_.load(std::memory_order_relaxed);
}

void TrackingAllocator::OnAllocate(int64_t bytes, ModelCounters* model) {
  const int64_t live =
      live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  live_allocations_.fetch_add(1, std::memory_order_relaxed);
  RaiseTo(peak_bytes_, live);
  for (uint64_t scopes = active_scopes_.load(std::memory_order_acquire);
       scopes != 0; scopes &= scopes - 1) {
    RaiseTo(scope_peak_bytes_[__builtin_ctzll(scopes)], live);
  }
  if (model != nullptr) {
    Ref(model);
    const int64_t model_live =
        model->live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    RaiseTo(model->peak_bytes, model_live);
  }
}

void TrackingAllocator::OnFree(int64_t bytes, ModelCounters* model) {
  live_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  live_allocations_.fetch_sub(1, std::memory_order_relaxed);
  if (model != nullptr) {
    model->live_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    Unref(model);
  }
}

absl::Status TrackingAllocator::RegisterModel(absl::string_view model_id) {
  if (model_id.empty()) {
    return absl::InvalidArgumentError("model id must not be empty");
  }
  absl::MutexLock lock(&mu_);
  if (models_.find(model_id) != models_.end()) {
    return absl::AlreadyExistsError(
        absl::StrCat("model '", model_id, "' is already registered"));
  }
  models_.emplace(std::string(model_id),
                  new ModelCounters(std::string(model_id)));
  return absl::OkStatus();
}

absl::Status TrackingAllocator::UnregisterModel(absl::string_view model_id) {
  ModelCounters* model = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(model_id);
    if (it == models_.end()) {
      return absl::NotFoundError(
          absl::StrCat("model '", model_id, "' is not registered"));
    }
    model = it->second;
    models_.erase(it);
  }
  Unref(model);
  return absl::OkStatus();
}

absl::StatusOr<ModelMemoryUsage> TrackingAllocator::GetModelUsage(
    absl::string_view model_id) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end()) {
    return absl::NotFoundError(
        absl::StrCat("model '", model_id, "' is not registered"));
  }
  ModelMemoryUsage usage;
  usage.live_bytes = it->second->live_bytes.load(std::memory_order_relaxed);
  usage.peak_bytes = it->second->peak_bytes.load(std::memory_order_relaxed);
  return usage;
}

absl::Status TrackingAllocator::ResetModelPeak(absl::string_view model_id) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end()) {
    return absl::NotFoundError(
        absl::StrCat("model '", model_id, "' is not registered"));
  }
  ModelCounters& model = *it->second;
  model.peak_bytes.store(model.live_bytes.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
  return absl::OkStatus();
}

ModelCounters* TrackingAllocator::AcquireModel(
    absl::string_view model_id) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_id);
  if (it == models_.end()) return nullptr;
  Ref(it->second);
  return it->second;
}

int TrackingAllocator::ClaimScopeSlot() {
  uint64_t active = active_scopes_.load(std::memory_order_relaxed);
  int slot = -1;
  do {
    if (~active == 0) return -1;
    slot = __builtin_ctzll(~active);
  } while (!active_scopes_.compare_exchange_weak(
      active, active | (uint64_t{1} << slot), std::memory_order_acq_rel));
  // The slot may still hold a previous scope's peak, and allocations may
  // already be raising it: overwrite it with the live bytes now.
  scope_peak_bytes_[slot].store(live_bytes_.load(std::memory_order_relaxed),
                                std::memory_order_relaxed);
  return slot;
}

void TrackingAllocator::ReleaseScopeSlot(int slot) {
  active_scopes_.fetch_and(~(uint64_t{1} << slot), std::memory_order_release);
}

int64_t TrackingAllocator::ScopePeakBytes(int slot) const {
  return scope_peak_bytes_[slot].load(std::memory_order_relaxed);
}

PeakScope::PeakScope() : allocator_(TrackingAllocator::Installed()) {
  if (allocator_ == nullptr) return;
  start_bytes_ = allocator_->AllocatedBytes();
  slot_ = allocator_->ClaimScopeSlot();
  exact_ = slot_ >= 0;
}

PeakScope::~PeakScope() { Stop(); }

void PeakScope::Stop() {
  if (stopped_) return;
  stopped_peak_bytes_ = peak_bytes();
  stopped_ = true;
  if (slot_ >= 0) allocator_->ReleaseScopeSlot(slot_);
  slot_ = -1;
}

int64_t PeakScope::peak_bytes() const {
  if (stopped_) return stopped_peak_bytes_;
  if (allocator_ == nullptr) return 0;
  const int64_t peak = slot_ >= 0 ? allocator_->ScopePeakBytes(slot_)
                                  : allocator_->PeakAllocatedBytes();
  return std::max(peak, start_bytes_);
}

ScopedModelTag::ScopedModelTag(absl::string_view model_id)
    : model_(nullptr), previous_(tls_model) {
  if (TrackingAllocator* allocator = TrackingAllocator::Installed()) {
    model_ = allocator->AcquireModel(model_id);
  }
  tls_model = model_;
}

std::string ScopedModelTag::CurrentModelId() {
  return tls_model == nullptr ? std::string() : tls_model->id;
}

ScopedModelTag::~ScopedModelTag() {
  tls_model = previous_;
  Unref(model_);
}

}  // namespace castserve::casting
