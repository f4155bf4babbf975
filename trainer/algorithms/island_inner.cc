#include "trainer/algorithms/island_inner.h"

#include <algorithm>

#include "core/tags.h"

namespace narrows::trainer {

namespace {

const core::KeyBlock kInner("an entry's inner steps",
                            "Whether a DiLoCo entry's workers take their inner steps alone or as one data-parallel "
                            "replica per island (hierarchical DiLoCo).");
const core::EnumKey<InnerMode> kInnerMode(
    kInner, "inner", {{"local", InnerMode::kLocal}, {"ddp", InnerMode::kDdp}}, InnerMode::kLocal,
    core::Doc("local: each worker alone; ddp: each island of network.islands as one data-parallel replica, "
              "the outer step across islands"));

// The island's gradient all-reduce: in the entry's private tag range (core/tags.h), which the
// outer step (core::tags::kReduce) never shares.
constexpr int kTagIsland = core::tags::Private(0);

}  // namespace

InnerMode ReadInnerMode(core::OptionReader& r, const core::Scenario& sc, int64_t round_steps) {
  const InnerMode mode = r.Enum(kInnerMode);
  if (mode != InnerMode::kDdp) return mode;
  for (const auto& f : sc.faults) {
    const bool departs = f.kind == core::FaultKind::kLeave || f.kind == core::FaultKind::kCrash;
    if (departs && f.at_step % round_steps != 0) {
      r.ErrorAt("inner", "inner: ddp takes leaves and crashes at outer steps only (a multiple of " +
                             std::to_string(round_steps) + " steps); worker " + std::to_string(f.worker) +
                             " departs at step " + std::to_string(f.at_step));
      break;
    }
  }
  return mode;
}

std::string InnerModePrefix(InnerMode mode) { return mode == InnerMode::kDdp ? "hierarchical-" : ""; }

std::vector<int> IslandOf(const core::Scenario& sc, const std::vector<int>& members, int rank) {
  for (const auto& island : sc.network.islands) {
    if (std::find(island.begin(), island.end(), rank) == island.end()) continue;
    std::vector<int> out;
    for (int r : members) {
      if (std::find(island.begin(), island.end(), r) != island.end()) out.push_back(r);
    }
    return out;
  }
  return members;
}

core::Result<double> IslandInnerStep(WorkerContext& w, std::vector<int>* island, int64_t step, int64_t rewarm_from,
                                     std::vector<float>* scratch) {
  Replica& rep = w.replica;
  const int64_t n = rep.model().num_params();
  const TokenBatch batch = w.sampler.Next(w.entry.sc.train.batch_size);
  const double local_loss = w.Compute(w.StepFlops(), [&] { return rep.ComputeGradients(batch); });
  double loss = local_loss;
  if (island->size() > 1) {
    std::vector<float>& buffer = *scratch;
    buffer.resize(static_cast<size_t>(n + 1));
    const auto fill = [&] {
      ToHost(rep.model().flat_grads(), buffer.data());
      buffer[static_cast<size_t>(n)] = static_cast<float>(local_loss);
    };
    // The island's own ring, whatever collective the entry's outer step takes.
    const auto ring = [&](core::Transport& via) {
      return w.Timed(WorkerContext::Spent::kCommunicating, [&] {
        core::CollectiveOptions o = w.Options(*island, w.roster->Tag(kTagIsland, step, *island));
        o.algorithm = core::AllReduceAlgorithm::kRing;
        return core::AllReduceSum(via, buffer.data(), n + 1, o);
      });
    };
    const int64_t before = w.Stats().bytes_sent;
    NARROWS_RETURN_IF_ERROR(w.roster->Run(island, step, w.entry.sc.deploy.on_failure, fill, ring, buffer.data(), n + 1));
    w.inner_bytes += w.Stats().bytes_sent - before;
    const float inv = 1.0f / static_cast<float>(island->size());
    for (int64_t i = 0; i <= n; ++i) buffer[static_cast<size_t>(i)] *= inv;
    FromHost(buffer.data(), rep.model().flat_grads());
    loss = buffer[static_cast<size_t>(n)];
  }
  const double lr = w.InnerLearningRate(step, rewarm_from);
  w.Compute(0.0, [&] { return rep.ApplyGradients(lr); });
  return loss;
}

void AddIslandRings(const PlanInputs& in, PlanRow* row) {
  std::vector<std::vector<int>> islands = in.sc->network.islands;
  if (islands.empty()) {
    islands.emplace_back(static_cast<size_t>(in.workers()));
    for (int i = 0; i < in.workers(); ++i) islands[0][static_cast<size_t>(i)] = i;
  }
  double sent = 0.0;
  const double ring_s = in.ConcurrentRingsSeconds(islands, 4.0 * (in.workload.params + 1), &sent);
  row->time_s += in.steps * ring_s;
  row->bytes_per_worker += in.steps * sent;
  row->note = row->note.empty() ? "inner steps: each island's ring every step" : row->note;
}

}  // namespace narrows::trainer
