// The process-wide allocator setting castserve serves with, in one place so
// that the daemon and the benchmarks that stand in for it run the same.
#ifndef CASTSERVE_CASTING_MEMORY_MALLOC_SETTINGS_H_
#define CASTSERVE_CASTING_MEMORY_MALLOC_SETTINGS_H_

namespace castserve::casting {

// glibc's mmap threshold, fixed at its largest value (32 MiB): blocks of
// that size and more get their own mappings, returned to the kernel when
// freed; smaller ones come from the arenas, whose freed chunks the next
// forward reuses without page faults. With a 1 MiB threshold every
// activation of a batched forward was a fresh mapping to fault in
// (all-MiniLM-L6-v2 at batch 8: 300 ms instead of 253 ms; BENCHMARKS.md,
// "Runtime"). The trim threshold is 8 MiB: an arena keeps up to that much
// freed memory at its top instead of giving it back at every free (glibc's
// 128 KiB made each request's transient copies new pages again: the shipped
// fp8 MiniLM served 24 req/s instead of 30; BENCHMARKS.md), which bounds what
// an arena holds cached. Fixed thresholds also stop glibc from raising them
// after large frees; unload trims the arenas
// (server/lifecycle/model_manager.cc), so an unloaded model's memory goes back
// but for those cached tops (tests/memory_lifecycle_integration_test.py).
//
// LibTorch's CPU allocations of 2 MiB and more are advised as transparent
// huge pages (madvise MADV_HUGEPAGE; LibTorch's THP_MEM_ALLOC_ENABLE, set to 1
// unless the environment already sets it; 0 turns it off). Weights made
// resident again on a wake or a load then fault in 2 MiB at a time instead of
// 4 KiB: the 1B fp8 cool wake went from 1.22 to 1.03 s, an f32 reload from
// 3.33 to 1.10 s (BENCHMARKS.md, "Huge pages"). The kernel honours the advice
// when /sys/kernel/mm/transparent_hugepage/enabled is `madvise` or `always`.
//
// Call once, early in main, before LibTorch allocates.
void UseServingMallocSettings();

}  // namespace castserve::casting

#endif  // CASTSERVE_CASTING_MEMORY_MALLOC_SETTINGS_H_
