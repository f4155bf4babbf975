// UsableCores: the cores this process may run on, which is what `threads: 0` (all cores) means. Under
// Slurm, taskset, a container's cpuset or mpirun's binding that is fewer than the machine has, and
// std::thread::hardware_concurrency() counts the machine's.
#pragma once

#include <sched.h>

#include <algorithm>
#include <thread>

namespace narrows::core {

inline int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace narrows::core
