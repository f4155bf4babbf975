#include "tools/cli/sizes_only.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/all_gather.h"
#include "core/codec.h"
#include "core/collectives.h"
#include "core/run_writer.h"
#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "tools/cli/build_version.h"
#include "tools/cli/format.h"
#include "tools/cli/run_folders.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/experiment.h"

namespace narrows::tools {
namespace {

core::AllReduceAlgorithm AlgorithmOf(core::CollectiveKind k) {
  switch (k) {
    case core::CollectiveKind::kStar: return core::AllReduceAlgorithm::kStar;
    case core::CollectiveKind::kTwoPhase: return core::AllReduceAlgorithm::kTwoPhase;
    case core::CollectiveKind::kTree: return core::AllReduceAlgorithm::kTree;
    case core::CollectiveKind::kHierarchical: return core::AllReduceAlgorithm::kHierarchical;
    case core::CollectiveKind::kRing:
    case core::CollectiveKind::kAuto: break;
  }
  return core::AllReduceAlgorithm::kRing;
}

// What one entry does as communication (trainer::SizesOnlySchedule): an all-reduce of part of the
// parameters (in `codec`, null: fp32) or an all-gather, every `every` steps.
struct Schedule {
  trainer::SizesOnlySchedule own;
  std::unique_ptr<core::Codec> codec;
};

core::Result<Schedule> ScheduleOf(const core::AlgorithmSpec& e) {
  Schedule s;
  if (e.collective == core::CollectiveKind::kHierarchical) {
    return core::Status::InvalidArgument("compare entry '" + e.name +
                                         "': --sizes-only has no hierarchical collective (ring, star, two-phase, tree)");
  }
  const trainer::AlgorithmPlugin* plugin = trainer::FindAlgorithm(e.algorithm);
  if (plugin == nullptr || !plugin->sizes_only) {
    std::string modelled;
    for (const auto* p : trainer::RegisteredAlgorithms()) {
      if (p->sizes_only) modelled += (modelled.empty() ? "" : ", ") + p->parser.name;
    }
    return core::Status::InvalidArgument("compare entry '" + e.name + "' (" + e.algorithm +
                                         "): --sizes-only models the entries of " + modelled + " only");
  }
  s.own = plugin->sizes_only(e);
  if (!s.own.not_modelled.empty()) {
    return core::Status::InvalidArgument("compare entry '" + e.name + "': --sizes-only does not model " +
                                         s.own.not_modelled + "; run it trained");
  }
  if (s.own.codec.format != "fp32") s.codec = std::make_unique<core::Codec>(s.own.codec);
  return s;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Sizes only take no fault but link_down.
core::Status CheckFaults(const core::Scenario& sc) {
  for (const auto& f : sc.faults) {
    if (f.kind != core::FaultKind::kLinkDown) {
      return core::Status::InvalidArgument("faults: --sizes-only takes link_down faults only (no leave, join or crash)");
    }
  }
  return core::Status::Ok();
}

// Every entry's schedule (ScheduleOf).
core::Result<std::vector<Schedule>> Schedules(const std::vector<core::AlgorithmSpec>& entries) {
  std::vector<Schedule> schedules;
  for (const auto& e : entries) {
    auto s = ScheduleOf(e);
    if (!s.ok()) return s.status();
    schedules.push_back(std::move(*s));
  }
  return schedules;
}

// What an entry's workers did on the emulator, per worker.
struct Traffic {
  std::vector<double> compute_s;
  std::vector<int64_t> sent;  // bytes
  std::vector<core::Status> failed;
  int64_t syncs = 0;
};

// The ring among `rank`'s island of network.islands (all of `collective`'s group without islands),
// on tags of its own: hierarchical DiLoCo's inner all-reduce.
core::CollectiveOptions IslandRing(const core::Scenario& sc, const core::CollectiveOptions& collective, int rank) {
  core::CollectiveOptions o = collective;
  o.algorithm = core::AllReduceAlgorithm::kRing;
  o.tag = collective.tag + 16;
  for (const auto& island : sc.network.islands) {  // trainer::IslandOf's rule; its header needs LibTorch
    if (std::find(island.begin(), island.end(), rank) != island.end()) o.group = island;
  }
  std::sort(o.group.begin(), o.group.end());
  return o;
}

// Every worker's steps on `engine`: its modelled compute (`step_flops` at its speed), with island
// rings its island's all-reduce of the gradients and the loss; then every schedule.every steps and
// after the last, an all-gather of `gather_bytes` a worker if given, else an all-reduce of its part of
// `count` floats (and of all `count` every whole_every steps, if given), with the votes if they ride
// along; sizes only.
Traffic Emulate(const core::Scenario& sc, emu::Engine& engine, const Schedule& schedule,
                const core::CollectiveOptions& collective, int64_t count, int64_t gather_bytes, double step_flops) {
  const int m = sc.workers.count;
  const trainer::SizesOnlySchedule& own = schedule.own;
  const int64_t tail = own.votes ? 1 + m : 0;  // the contributor count and the votes
  const int64_t part = (own.part ? own.part(count) : count) + tail;
  Traffic traffic{std::vector<double>(static_cast<size_t>(m), 0.0), std::vector<int64_t>(static_cast<size_t>(m), 0),
                  std::vector<core::Status>(static_cast<size_t>(m)), 0};
  engine.Run([&](int rank) {
    core::Transport& t = engine.endpoint(rank);
    const double speed = sc.workers.speed.empty() ? 1.0 : sc.workers.speed[static_cast<size_t>(rank)];
    const double step_s = step_flops / sc.compute.device_flops / speed;
    const core::CollectiveOptions island = IslandRing(sc, collective, rank);
    for (int64_t step = 0; step < sc.train.steps; ++step) {
      t.clock().ChargeCompute(step_s);
      traffic.compute_s[static_cast<size_t>(rank)] += step_s;
      core::Status s = own.island_rings ? core::AllReduceSizeOnly(t, count + 1, nullptr, island) : core::Status::Ok();
      if (!s.ok()) {
        traffic.failed[static_cast<size_t>(rank)] = s;
        return;
      }
      if ((step + 1) % own.every != 0 && step + 1 != sc.train.steps) continue;
      s = own.gather_bytes ? core::AllGatherSizeOnly(t, gather_bytes, collective.group, collective.tag)
                           : core::AllReduceSizeOnly(t, part, schedule.codec.get(), collective);
      const bool whole = own.whole_every > 0 && ((step + 1) % own.whole_every == 0 || step + 1 == sc.train.steps);
      if (s.ok() && whole) s = core::AllReduceSizeOnly(t, count + tail, nullptr, collective);
      if (!s.ok()) {
        traffic.failed[static_cast<size_t>(rank)] = s;
        return;
      }
      if (rank == 0) ++traffic.syncs;
    }
    traffic.sent[static_cast<size_t>(rank)] = t.stats().bytes_sent;
  });
  return traffic;
}

// Entry `e` on the emulator: its links.json, its row of the table (names `width` wide) and its line in `*results`, and
// summary.json rewritten with it.
core::Status RunEntry(const core::Scenario& sc, const core::AlgorithmSpec& e, const Schedule& schedule,
                      const std::string& run_dir, int width, nlohmann::json* results) {
  const int m = sc.workers.count;
  core::ModelSpec spec = sc.model;
  spec.vocab_size = 256;
  if (e.n_layers > 0) spec.n_layers = e.n_layers;
  const trainer::ModelCost cost = trainer::CostOf(spec);
  const double step_flops = cost.train_flops_per_token * static_cast<double>(sc.train.batch_size * sc.model.seq_len);
  const int64_t count = cost.params;
  core::CollectiveOptions collective;
  collective.group.resize(static_cast<size_t>(m));
  std::iota(collective.group.begin(), collective.group.end(), 0);
  collective.algorithm = AlgorithmOf(e.collective);
  emu::Engine engine(m, emu::NetworkFromScenario(sc));
  engine.SetStallTimeout(sc.network.stall_timeout_s);
  const auto start = std::chrono::steady_clock::now();
  const int64_t gather_bytes = schedule.own.gather_bytes ? schedule.own.gather_bytes(spec, m) : 0;
  const Traffic traffic = Emulate(sc, engine, schedule, collective, count, gather_bytes, step_flops);
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double virtual_s = 0;
  for (int r = 0; r < m; ++r) virtual_s = std::max(virtual_s, engine.clock_of(r));
  const nlohmann::json links = LinksJson(engine.network(), virtual_s);
  const std::string entry_dir = run_dir + "/" + e.name;
  if (!links.is_null()) {
    NARROWS_RETURN_IF_ERROR(core::MakeDirs(entry_dir));
    NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(entry_dir + "/links.json", links.dump() + "\n"));
  }
  for (const auto& s : traffic.failed) {
    if (!s.ok()) return core::Status(s.code(), "compare entry '" + e.name + "': " + s.message());
  }
  const double mean_sent = static_cast<double>(std::accumulate(traffic.sent.begin(), traffic.sent.end(), int64_t{0})) / m;
  const double utilization =
      virtual_s > 0 ? std::accumulate(traffic.compute_s.begin(), traffic.compute_s.end(), 0.0) / m / virtual_s : 0.0;
  const double rss = PeakRssMb();
  nlohmann::json r = {{"name", e.name},
                      {"algorithm", e.algorithm},
                      {"collective", schedule.own.gather_bytes ? std::string("all-gather")
                                                               : core::CollectiveName(collective, schedule.codec.get())},
                      {"workers", m},
                      {"params", count},
                      {"steps", sc.train.steps},
                      {"time_s", virtual_s},
                      {"virtual_time_s", virtual_s},
                      {"bytes_sent_per_worker", mean_sent},
                      {"outer_syncs", schedule.own.outer_syncs ? traffic.syncs : 0},
                      {"compute_utilization", utilization},
                      {"host_time_s", host_s},
                      {"host_s_per_virtual_s", virtual_s > 0 ? host_s / virtual_s : 0.0},
                      {"peak_rss_mb", rss}};
  if (!links.is_null()) r["network"] = NetworkSummary(links);
  results->push_back(r);
  std::printf("%-*s %9s %12.2f %12s %7lld %7.1f%% %12.2f %13.4f %9.0fM\n", width, e.name.c_str(),
              Si(static_cast<double>(count), "").c_str(), virtual_s, Bytes(mean_sent).c_str(),
              static_cast<long long>(schedule.own.outer_syncs ? traffic.syncs : 0), 100 * utilization, host_s, virtual_s > 0 ? host_s / virtual_s : 0.0, rss);
  std::fflush(stdout);
  const nlohmann::json summary = {{"scenario", sc.name}, {"mode", "sizes-only"}, {"clock", "virtual"}, {"narrows", BuildVersion()}, {"results", *results}};
  return core::WriteFileAtomic(run_dir + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace

core::Result<nlohmann::json> RunSizesOnly(const core::Scenario& sc, const RunOptions& options) {
  NARROWS_RETURN_IF_ERROR(CheckFaults(sc));
  const std::vector<core::AlgorithmSpec> entries = Entries(sc);
  auto schedules = Schedules(entries);
  if (!schedules.ok()) return schedules.status();
  const int m = sc.workers.count;
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  // Sizes only are quick: this scenario's folder is run again, another's refused (unless --force).
  auto use = ClaimResultFolder(run_dir, sc.resolved_yaml, options.existing);
  if (!use.ok()) return use.status();
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));
  nlohmann::json results = nlohmann::json::array();
  if (options.progress != nullptr) {
    std::fprintf(options.progress, "sizes only: %d workers, no training (modelled compute at %s per worker)\n", m,
                 Si(sc.compute.device_flops, "FLOP/s").c_str());
  }
  nlohmann::json names = nlohmann::json::array();
  for (const auto& e : entries) names.push_back({{"name", e.name}});
  const int width = NameWidth(names);
  std::printf("%-*s %9s %12s %12s %7s %8s %12s %13s %10s\n", width, "entry", "params", "virtual s", "sent/worker",
              "syncs", "compute", "host s", "host s/virt s", "peak RSS");
  for (size_t i = 0; i < entries.size(); ++i) {
    NARROWS_RETURN_IF_ERROR(RunEntry(sc, entries[i], (*schedules)[i], run_dir, width, &results));
  }
  std::printf("results: %s/summary.json\n", run_dir.c_str());
  return nlohmann::json{{"scenario", sc.name}, {"mode", "sizes-only"}, {"results", results}};
}

}  // namespace narrows::tools
