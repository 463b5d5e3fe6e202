#include "casting/formats/safe_copy.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace castserve::casting {
namespace {

// Per-thread state of the copy in flight; trivially constructible so that the
// handler can read it without any lazy initialization.
struct GuardedCopy {
  sigjmp_buf jump_buffer;
  uintptr_t begin = 0;
  uintptr_t end = 0;  // begin == end: no guarded copy on this thread.
  uintptr_t fault_address = 0;
};

thread_local GuardedCopy guarded_copy;

struct sigaction previous_action;

void ChainToPrevious(int signal, siginfo_t* info, void* context) {
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction != nullptr) {
      previous_action.sa_sigaction(signal, info, context);
      return;
    }
  } else if (previous_action.sa_handler != SIG_DFL &&
             previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(signal);
    return;
  }
  // Default action: restore it; returning re-executes the faulting access,
  // which now terminates the process with SIGBUS as usual.
  struct sigaction default_action;
  memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &default_action, nullptr);
}

void HandleSigbus(int signal, siginfo_t* info, void* context) {
  GuardedCopy& copy = guarded_copy;
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (copy.begin != copy.end && address >= copy.begin && address < copy.end) {
    copy.fault_address = address;
    siglongjmp(copy.jump_buffer, 1);
  }
  ChainToPrevious(signal, info, context);
}

void InstallHandlerOnce() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = HandleSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &previous_action);
  });
}

}  // namespace

absl::Status CopyFromMapping(void* dst, const void* src, size_t size_bytes) {
  return ReadFromMapping(src, size_bytes,
                         [&] { std::memcpy(dst, src, size_bytes); });
}

absl::Status ReadFromMapping(const void* src, size_t size_bytes,
                             absl::FunctionRef<void()> read) {
  if (size_bytes == 0) return absl::OkStatus();
  InstallHandlerOnce();
  // volatile: these are read after siglongjmp returns to this frame.
  GuardedCopy* volatile copy = &guarded_copy;
  const auto begin = reinterpret_cast<uintptr_t>(src);
  if (sigsetjmp(copy->jump_buffer, /*savemask=*/1) != 0) {
    const uintptr_t offset = copy->fault_address - begin;
    copy->begin = copy->end = 0;
    return absl::DataLossError(absl::StrCat(
        "the mapped file vanished under a read (truncated or replaced while "
        "mapped): fault at byte ",
        offset, " of a ", size_bytes, "-byte read"));
  }
  copy->begin = begin;
  copy->end = begin + size_bytes;
  // Keep the compiler from moving the range stores across the copy.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  read();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  copy->begin = copy->end = 0;
  return absl::OkStatus();
}

}  // namespace castserve::casting
