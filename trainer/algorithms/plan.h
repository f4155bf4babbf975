// What the capacity planner (tools/cli/plan_command.cc, docs/planner.md) gives an algorithm's
// prediction, and what the prediction returns: the vocabulary of AlgorithmPlugin::plan. The planner
// owns the network model and the workload; an algorithm turns them into time, compute and bytes of
// one entry without knowing how delivery times are computed. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/codec.h"
#include "core/scenario.h"

namespace narrows::trainer {

// A training run to predict, at the size of the entry's model.
struct Workload {
  double params = 0;           // N
  double flops_per_token = 0;  // training FLOPs per token (6N for the presets)
  double tokens = 0;           // D, all workers
  double batch_tokens = 0;     // per optimiser step, all workers
  std::string label;
};

// One message of a collective step, sent at the step's start.
struct PlanMessage {
  int src = 0, dst = 0;
  int64_t bytes = 0;
};

struct PlanRow {
  std::string name;
  double time_s = 0, compute_s = 0, bytes_per_worker = 0;
  int64_t syncs = 0;
  std::string note;  // what the prediction assumes, where the run may differ ("" if nothing)
};

struct PlanInputs {
  const core::Scenario* sc = nullptr;  // network bandwidths as the planner scales them
  Workload workload;                   // the entry's own size (its n_layers)
  double steps = 0;                    // optimiser steps at the base batch
  double nominal_step_s = 0;           // one step's compute of a worker at speed 1
  double step_s = 0;                   // the same at the slowest worker's speed
  double critical_compute_s = 0;       // steps * step_s: every synchronisation waits for the slowest
  double compute_s = 0;                // the workers' mean compute time
  // When the last of `messages`, all sent at time 0, arrives on the scenario's network model.
  std::function<double(const std::vector<PlanMessage>&)> slowest_delivery;
  // When each of `messages`, all sent at time 0, arrives (in their order).
  std::function<std::vector<double>(const std::vector<PlanMessage>&)> deliveries;

  int workers() const { return sc->workers.count; }
  // A ring all-reduce of `bytes` among `group` (all workers when empty): 2(g-1) steps, in each of
  // which every member sends bytes/g to the next at once.
  double RingAllReduceSeconds(double bytes, const std::vector<int>& group = {}) const;
  // core::AllReduceSumEncoded among all of a dense format: two phases, in each of which every
  // worker sends a chunk (1/M of the buffer) to each of the others at once: `scatter_bytes` (the
  // buffer in the codec) to the owners, then `gather_bytes` (in the second phase's codec) back.
  double EncodedAllReduceSeconds(double scatter_bytes, double gather_bytes) const;
  // Every worker (of `group`; empty: all) sends `bytes` to each of the others at once (a sparse
  // format's all-gather).
  double AllGatherSeconds(double bytes, const std::vector<int>& group = {}) const;
  // The hierarchical all-reduce over network.islands: each island's members send `island_bytes` to
  // its leader (its first worker) at once, the leaders (IslandLeaders) take `among_leaders_s`, and
  // each leader sends the result back. Without islands, `among_leaders_s`.
  double IslandsSeconds(double island_bytes, double among_leaders_s) const;
  std::vector<int> IslandLeaders() const;
  // An all-reduce among all by `kind`, as core/collectives.cc runs it, of a buffer that is
  // `scatter_bytes` on its way to the sums' owners and `gather_bytes` on its way back (the codec and
  // the second phase's codec; equal for fp32): a ring (M-1 steps of chunks each way); two phases of
  // chunks (two-phase); every worker's buffer to worker 0, then the sum back (star); a binary tree,
  // each rank sending up once its children's sums came and down once it has the result;
  // hierarchical as each island's members to its leader, a ring among the leaders, and back. Each worker sends, averaged
  // over the workers, (M-1)/M (scatter_bytes + gather_bytes) whichever the collective.
  double AllReduceSeconds(double scatter_bytes, double gather_bytes, core::CollectiveKind kind) const;
  double AllReduceSeconds(double bytes, core::CollectiveKind kind) const { return AllReduceSeconds(bytes, bytes, kind); }
  // The time of `rounds` rounds in each of which every worker computes for compute_s at speed 1 (its
  // own speed's share of it, workers.speed) and then all workers all-reduce `bytes` in one ring, as
  // the ring runs (ConcurrentRingsSeconds): a worker starts its round's ring once its compute ends and
  // its next round's compute once its ring ends, so a round's ring can begin at one worker while
  // another's ends, and over many rounds the ring's chain of hops costs each hop's mean, not the
  // slowest stretch of it. Simulated for up to 64 rounds; beyond, extended at the last rounds' rate.
  // With a lossy format the reduce-scatter's chunks are `scatter_bytes`' and the all-gather's
  // `gather_bytes`' (the codec and the second phase's codec).
  double RingRoundsSeconds(double scatter_bytes, double gather_bytes, double compute_s, double rounds) const;
  double RingRoundsSeconds(double bytes, double compute_s, double rounds) const {
    return RingRoundsSeconds(bytes, bytes, compute_s, rounds);
  }
  // The same with the all-reduce in buckets, each its own ring started when its share of the round's
  // compute is done (`ready_at`, a fraction of compute_s; DDP's buckets during backward), the rings
  // sharing each link one chunk at a time; a worker's round ends when its compute and every
  // bucket's ring have.
  // `gather_share`: the all-gather's chunks over the reduce-scatter's (a lossy format's two codecs).
  // `overlap_s` > 0 (one bucket, Streaming DiLoCo's tau): a round's ring starts when its compute ends
  // and runs beside the next round's, which waits for it only overlap_s (at speed 1) in; the last
  // round's ring is waited for. `last_compute_s` >= 0: the last round computes that long instead (a
  // run whose steps the rounds do not divide; simulated runs only).
  double BucketedRingRoundsSeconds(const std::vector<double>& bucket_bytes, const std::vector<double>& ready_at,
                                   double compute_s, double rounds, double gather_share = 1.0,
                                   double overlap_s = 0.0, double last_compute_s = -1.0) const;
  // The time of `rounds` rounds, each a compute of compute_s at speed 1 (each worker's speed's share)
  // and a tree all-reduce (scatter_bytes up, gather_bytes down), on each worker's clock: a rank sends
  // up once its compute ended and its children's sums came, so a straggler's subtree waits for it
  // alone. Simulated for up to 32 rounds; beyond, extended at the last rounds' rate.
  double TreeRoundsSeconds(double scatter_bytes, double gather_bytes, double compute_s, double rounds) const;
  // The time of one ring among each of `groups` at once (disjoint workers), as the ring runs: in
  // each of its 2(g-1) steps a member sends a chunk once it has the one its predecessor sent in the
  // step before and its own link has sent its last, so unequal hops (an island's WAN hop among fast
  // ones) cost their own time along the ring's chain, not the slowest hop's at every step. Each
  // hop's latency and transfer come from the network model with every hop sending at once (a
  // one-byte message, then the chunk). `*sent_per_worker` grows by the bytes each worker sends,
  // averaged over all workers.
  double ConcurrentRingsSeconds(const std::vector<std::vector<int>>& groups, double bytes,
                                double* sent_per_worker) const;
};

}  // namespace narrows::trainer
