// DiPaCo's paths (arXiv 2403.10616 §2): L levels of K modules; path p takes module digit_l(p) (its
// l-th base-K digit) at level l, so there are K^L paths, and worker w trains path w mod K^L. A
// module is shared by the workers whose paths hold it. Internal to trainer/.
#pragma once

#include <cstdint>
#include <vector>

namespace narrows::trainer {

struct PathLayout {
  int64_t levels = 1, modules = 1;

  int64_t paths() const {
    int64_t p = 1;
    for (int64_t l = 0; l < levels; ++l) p *= modules;
    return p;
  }
  int64_t PathOf(int rank) const { return rank % paths(); }
  // The module path `path` takes at `level`.
  int64_t ModuleOf(int64_t path, int64_t level) const {
    for (int64_t l = 0; l < level; ++l) path /= modules;
    return path % modules;
  }
  // The ranks among `ranks` whose path holds module `module` of `level` (in the order given).
  std::vector<int> Sharing(const std::vector<int>& ranks, int64_t level, int64_t module) const {
    std::vector<int> out;
    for (int r : ranks) {
      if (ModuleOf(PathOf(r), level) == module) out.push_back(r);
    }
    return out;
  }
};

}  // namespace narrows::trainer
