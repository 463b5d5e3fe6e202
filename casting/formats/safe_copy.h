#ifndef CASTSERVE_CASTING_FORMATS_SAFE_COPY_H_
#define CASTSERVE_CASTING_FORMATS_SAFE_COPY_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace castserve::casting {

// Copies `size_bytes` from `src` (inside a file mapping) to `dst`, turning a
// SIGBUS raised by a vanished page (the file was truncated or replaced while
// mapped) into an error instead of killing the process.
//
// Choice: a SIGBUS handler with sigsetjmp/siglongjmp rather than pread. The
// mapping stays the storage (zero-copy, page-cache backed, madvise-able), and
// the guard costs one sigsetjmp per call. The guarded region is a plain
// memcpy, so jumping out of it skips no destructor.
//
// Mechanism: on first use a SIGBUS handler is installed process-wide
// (sigaction, SA_SIGINFO | SA_ONSTACK | SA_NODEFER). A thread-local record
// holds the jump buffer and the guarded source range of the copy running on
// this thread. A fault inside that range jumps back and the call returns
// DATA_LOSS; any other SIGBUS is passed to the handler that was installed
// before ours (or, with none, the default action: the process dies as it
// would without us).
//
// Thread safety: safe to call concurrently from any number of threads.
// Not async-signal-safe: do not call from a signal handler.
// `dst` must not overlap `src`; `dst` must be ordinary writable memory.
absl::Status CopyFromMapping(void* dst, const void* src, size_t size_bytes);

// The same guard around any read: runs `read`, which may read only the
// `size_bytes` bytes at `src` (inside a file mapping) and must not allocate,
// take locks or throw (a SIGBUS in that range jumps out of it: nothing it
// started is unwound). Returns DATA_LOSS if the pages vanished, OK otherwise.
// What `read` wrote before a fault stays written.
absl::Status ReadFromMapping(const void* src, size_t size_bytes,
                             absl::FunctionRef<void()> read);

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_FORMATS_SAFE_COPY_H_
