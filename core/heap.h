// KeepLargeBlocksOnTheHeap: one process-wide glibc setting for processes that allocate and free
// the same large buffers over and over (a worker's activations every step, a transport's messages).
//
// glibc serves a block above its mmap threshold (128 kB, raised only as such blocks are freed)
// with a fresh mapping, and gives freed memory at the heap's top back to the system beyond its trim
// threshold, so each such buffer page-faults and is zeroed by the kernel again: a third of the time
// of a 64 MB all-reduce (deploy), ~7% of a `tiny` training step's CPU time (trainer; `perf stat -e
// page-faults build/bench_trainer tiny 16 2 20 3`). Blocks up to 32 MiB stay on the heap and up to
// 1 GiB of free top is kept, for reuse. Costs memory where many replicas share a process
// (docs/explanation/emulator.md). Idempotent; cheap after the first call.
#pragma once

#include <malloc.h>

namespace narrows::core {

inline void KeepLargeBlocksOnTheHeap() {
  static const bool tuned = [] {
    return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  }();
  (void)tuned;
}

}  // namespace narrows::core
