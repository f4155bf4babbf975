// Streaming DiLoCo's fragments (arXiv 2501.18512 §2.2): the model's parameters split by transformer
// block into P sets, each a list of ranges of the flat parameter buffer; and the eager outer
// gradient. Internal to trainer/.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/scenario.h"
#include "trainer/gpt.h"

namespace narrows::trainer {

// How blocks are dealt to fragments: strided (block b in fragment b mod P) or sequential.
enum class FragmentPattern { kStrided, kSequential };

struct Fragment {
  std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, numel) into flat_params(), ascending
  int64_t numel = 0;
};

// Strided: block b in fragment b mod P; sequential: consecutive blocks. The embeddings join
// fragment 0 and the final LayerNorm the fragment of the last block. Every parameter is in exactly
// one fragment. REQUIRES: 1 <= fragments <= n_layers.
std::vector<Fragment> SplitIntoFragments(const std::vector<ParamSlice>& slices, int64_t n_layers, int64_t fragments,
                                         FragmentPattern pattern);

// Eager outer updates (arXiv 2502.12996): the outer gradient a worker steps on at once, from its
// fresh pseudo-gradient `own` and the members' of the previous synchronisation (`previous_sum`, its
// own `previous_own` among them): (own + previous_sum - previous_own) / members. With one member it
// is `own`, exactly.
torch::Tensor EagerOuterGradient(const torch::Tensor& own, const torch::Tensor& previous_sum,
                                 const torch::Tensor& previous_own, int64_t members);

}  // namespace narrows::trainer
