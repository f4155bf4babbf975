// NoLoCo's gossip (arXiv 2506.10911): who averages with whom in a round, and the outer step of one
// worker of a pair. Internal to trainer/.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/torch_pch.h"

namespace narrows::trainer {

// The partner of every rank 0..world-1 in the round that ends at `step`: a uniformly random perfect
// matching drawn from (seed, step) alone, so that every worker, emulated or real, draws the same
// one whoever it believes alive. With an odd world the rank drawn last sits the round out (-1).
std::vector<int> GossipPartners(int world, uint64_t seed, int64_t step);

// One worker's outer step with its partner's (the paper's modified Nesterov momentum):
//   velocity = momentum * velocity + outer_lr * (mean(local) - mean(anchor))
//                                  + consensus_lr * (mean(anchor) - anchor)
//   anchor += velocity; the worker continues from the new anchor.
// `anchor` is the worker's parameters when the round began, `local` after its inner steps; the
// means are over the pair (this worker's alone when it has no partner: then the step is its own
// outer step with momentum). With consensus_lr == outer_lr the anchors cancel from the first term
// and only mean(local) is needed (what the pair sends each other).
struct GossipStep {
  double outer_lr = 0.7, momentum = 0.3, consensus_lr = 0.7;
};
void GossipOuterStep(const GossipStep& o, torch::Tensor& anchor, torch::Tensor& velocity, const torch::Tensor& mean_local,
                     const torch::Tensor& mean_anchor);

}  // namespace narrows::trainer
