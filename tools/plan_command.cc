#include "tools/plan_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/run_writer.h"
#include "emu/network_from_scenario.h"
#include "trainer/algorithms/batch_schedule.h"
#include "trainer/algorithms/paths.h"
#include "trainer/experiment.h"

namespace narrows::tools {
namespace {

using core::Status;

struct Workload {
  double params = 0;           // N
  double flops_per_token = 0;  // training FLOPs per token (6N for the presets)
  double tokens = 0;           // D, all workers
  double batch_tokens = 0;     // per optimiser step, all workers
  std::string label;
};

// When the last of `messages`, all sent at time 0, arrives on the scenario's network model.
double SlowestDelivery(const core::Scenario& sc, const std::vector<sim::Message>& messages) {
  auto model = emu::NetworkFromScenario(sc);
  const auto delivered = sim::SimulateMessages(*model, messages);
  return *std::max_element(delivered.begin(), delivered.end());
}

// The time of a ring all-reduce of `bytes` among the scenario's workers on its network model:
// 2(M-1) ring steps, in each of which every worker sends bytes/M to the next at once.
double RingAllReduceSeconds(const core::Scenario& sc, double bytes) {
  const int m = sc.workers.count;
  if (m < 2 || bytes <= 0) return 0.0;
  std::vector<sim::Message> step;
  for (int w = 0; w < m; ++w) step.push_back({w, (w + 1) % m, static_cast<int64_t>(std::ceil(bytes / m)), 0.0});
  return 2.0 * (m - 1) * SlowestDelivery(sc, step);
}

// The time of core::AllReduceSumEncoded of `bytes` (encoded): two phases, in each of which every
// worker sends bytes/M to each of the others at once (to the owners, then the owners' sums back).
double EncodedAllReduceSeconds(const core::Scenario& sc, double bytes) {
  const int m = sc.workers.count;
  if (m < 2 || bytes <= 0) return 0.0;
  std::vector<sim::Message> phase;
  for (int w = 0; w < m; ++w) {
    for (int v = 0; v < m; ++v) {
      if (v != w) phase.push_back({w, v, static_cast<int64_t>(std::ceil(bytes / m)), 0.0});
    }
  }
  return 2.0 * SlowestDelivery(sc, phase);
}

struct Row {
  std::string name;
  double time_s = 0, compute_s = 0, bytes_per_worker = 0;
  int64_t syncs = 0;
};

// How a DiLoCo-family row synchronises: P fragments, each behind tau inner steps, its outer
// gradients in `codec` — the trainer's own terms (core::AlgorithmSpec, core::Codec).
struct Streaming {
  int64_t fragments = 1;
  double overlap_steps = 0;
  core::CodecSpec codec;
};

// --bits as a codec: 32 fp32, 16 bf16, 8 int8, 4 int4, 1 sign (the formats the trainer sends).
core::Result<core::CodecSpec> CodecForBits(int bits) {
  core::CodecSpec c;
  switch (bits) {
    case 32: c.format = core::CodecFormat::kFp32; break;
    case 16: c.format = core::CodecFormat::kBf16; break;
    case 8: c.format = core::CodecFormat::kInt8; break;
    case 4: c.format = core::CodecFormat::kInt4; break;
    case 1: c.format = core::CodecFormat::kSign; break;
    default: return Status::InvalidArgument("--bits: expected 32, 16, 8, 4 or 1 (fp32, bf16, int8, int4, sign), got " +
                                            std::to_string(bits));
  }
  return c;
}

// dipaco (trainer/algorithms/dipaco.cc): DiLoCo's rounds, but each outer step is one ring
// all-reduce of the embeddings and final norm among all M workers, then per level one ring per
// module among the workers whose path holds it (the level's rings at once, on disjoint workers),
// each of a module's fp32 pseudo-gradient and its token weight. Block and shared sizes from the
// scenario's model (a block: the parameters one more layer adds).
Row PredictDipaco(const core::Scenario& sc, const core::AlgorithmSpec& a, double steps, double critical_compute,
                  Row r) {
  const int m = sc.workers.count;
  core::ModelSpec spec = sc.model;
  if (spec.vocab_size <= 0) spec.vocab_size = 256;
  spec.n_layers = 1;
  const double one = static_cast<double>(trainer::CostOf(spec).params);
  spec.n_layers = 2;
  const double block = static_cast<double>(trainer::CostOf(spec).params) - one, shared = one - block;
  const double module = block * static_cast<double>((a.n_layers > 0 ? a.n_layers : sc.model.n_layers) / a.levels);
  const trainer::PathLayout layout{a.levels, a.modules};
  std::vector<int> all(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) all[static_cast<size_t>(i)] = i;
  // One ring among each group at once: the time of its slowest piece times 2(g - 1) steps.
  auto rings = [&](const std::vector<std::vector<int>>& groups, double bytes, double* sent_per_worker) {
    std::vector<sim::Message> step;
    size_t longest = 0;
    for (const auto& g : groups) {
      if (g.size() < 2) continue;
      longest = std::max(longest, g.size());
      const double n = static_cast<double>(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        step.push_back({g[i], g[(i + 1) % g.size()], static_cast<int64_t>(std::ceil(bytes / n)), 0.0});
      }
      *sent_per_worker += n * 2.0 * (n - 1) / n * bytes / m;
    }
    return step.empty() ? 0.0 : 2.0 * static_cast<double>(longest - 1) * SlowestDelivery(sc, step);
  };
  double per_round_s = 0, per_round_bytes = 0;
  per_round_s += rings({all}, 4.0 * (shared + 1), &per_round_bytes);
  for (int64_t l = 0; l < a.levels; ++l) {
    std::vector<std::vector<int>> groups;
    for (int64_t k = 0; k < a.modules; ++k) groups.push_back(layout.Sharing(all, l, k));
    per_round_s += rings(groups, 4.0 * (module + 1), &per_round_bytes);
  }
  const double rounds = std::ceil(steps / static_cast<double>(a.inner_steps));
  r.syncs = static_cast<int64_t>(rounds);
  r.time_s = critical_compute + rounds * per_round_s;
  r.bytes_per_worker = rounds * per_round_bytes;
  return r;
}

// async-diloco (trainer/algorithms/async_diloco.cc): the budget of workers * steps inner steps is
// applied in U updates of H steps. Worker i cycles through H steps at its own speed and a round trip
// to the server beside worker 0 (its encoded push in, the fp32 parameters back; none for worker 0),
// so the updates arrive at known times, unless worker 0's link, which carries every remote push in
// and every reply out, is slower still. Assumes no DyLU (each push is H steps) and the
// scenario's uniform access links; queueing at the server is counted only as that link's load.
Row PredictAsync(const core::Scenario& sc, const core::AlgorithmSpec& a, const Workload& w, double steps,
                 double nominal, Row r) {
  const int m = sc.workers.count;
  const double updates = std::ceil(steps * m / static_cast<double>(a.inner_steps));
  constexpr double kHeader = 24;  // trainer/algorithms/async_diloco.cc: PushHeader, ReplyHeader
  const double push = kHeader + static_cast<double>(core::Codec(a.outer_gradient).EncodedBytes(static_cast<int64_t>(w.params)));
  const double reply = kHeader + 4.0 * static_cast<double>(w.params);
  double round_trip = 0, server_link = 0;
  if (m > 1) {
    round_trip = SlowestDelivery(sc, {{1, 0, static_cast<int64_t>(push), 0.0}}) +
                 SlowestDelivery(sc, {{0, 1, static_cast<int64_t>(reply), 0.0}});
    std::vector<sim::Message> in, out;
    for (int v = 1; v < m; ++v) {
      in.push_back({v, 0, static_cast<int64_t>(push), 0.0});
      out.push_back({0, v, static_cast<int64_t>(reply), 0.0});
    }
    server_link = std::max(SlowestDelivery(sc, in), SlowestDelivery(sc, out)) / (m - 1);  // per remote update
  }
  // The updates in the order they arrive: worker i's k-th at k * cycle_i (the budget runs out at the
  // U-th; the others then stop at once), unless the server's link is the slower.
  std::vector<double> cycle(static_cast<size_t>(m)), next(static_cast<size_t>(m));
  std::vector<int64_t> pushes(static_cast<size_t>(m), 0);
  for (int i = 0; i < m; ++i) {
    cycle[static_cast<size_t>(i)] =
        static_cast<double>(a.inner_steps) * nominal / sc.workers.speed[static_cast<size_t>(i)] + (i == 0 ? 0.0 : round_trip);
    next[static_cast<size_t>(i)] = cycle[static_cast<size_t>(i)];
  }
  double by_workers = 0;
  int64_t remote = 0;
  for (int64_t u = 0; u < static_cast<int64_t>(updates); ++u) {
    const auto i = static_cast<size_t>(std::min_element(next.begin(), next.end()) - next.begin());
    by_workers = next[i];
    next[i] += cycle[i];
    ++pushes[i];
    if (i > 0) ++remote;
  }
  r.time_s = std::max(by_workers, static_cast<double>(remote) * server_link);
  r.compute_s = 0;  // every worker computes but for its round trips
  for (int i = 0; i < m; ++i) {
    const double waiting = static_cast<double>(pushes[static_cast<size_t>(i)]) * (i == 0 ? 0.0 : round_trip);
    const double chunk = cycle[static_cast<size_t>(i)] - (i == 0 ? 0.0 : round_trip);
    // Computing but for its round trips, and at most the chunk after its last push; a slower server
    // link only adds waiting.
    r.compute_s += std::min(std::max(0.0, by_workers - waiting),
                            static_cast<double>(pushes[static_cast<size_t>(i)] + 1) * chunk) / m;
  }
  r.syncs = static_cast<int64_t>(updates);
  r.bytes_per_worker = static_cast<double>(remote) * (push + reply) / m;
  return r;
}

// The prediction for one entry: DDP, or a DiLoCo-family entry synchronising as `how`.
Row Predict(const core::Scenario& sc, const core::AlgorithmSpec& a, const Workload& w, double flops,
            const Streaming& how) {
  const int m = sc.workers.count;
  const double slowest = *std::min_element(sc.workers.speed.begin(), sc.workers.speed.end());
  const double steps = std::ceil(w.tokens / w.batch_tokens);
  // Every synchronisation waits for the slowest worker; utilisation is the workers' mean compute
  // over the time, as `narrows run` reports it.
  const double nominal = w.flops_per_token * w.batch_tokens / m / flops;
  const double step_compute = nominal / slowest;
  double mean_speed_inverse = 0;
  for (double s : sc.workers.speed) mean_speed_inverse += 1.0 / s / m;
  Row r;
  r.name = a.name;
  const double critical_compute = steps * step_compute;
  r.compute_s = steps * nominal * mean_speed_inverse;
  const double ring = 2.0 * (m - 1) / m;  // bytes each worker sends per byte all-reduced
  if (a.kind == core::AlgorithmKind::kDdp) {
    const double bytes = 4.0 * (w.params + 1);  // gradients and the loss, float32
    // Overlapped DDP hides the all-reduce behind backward (two thirds of a step's compute), except
    // for the last bucket, ready only when backward ends (a model within the first bucket: all of it).
    const double all = RingAllReduceSeconds(sc, bytes);
    const double first_bucket = std::min(1.0, a.bucket_mb) * 1e6;
    const bool adaptive = a.batch_schedule != core::BatchSchedule::kConstant;  // one all-reduce after backward
    const double exposed = !a.overlap || adaptive || bytes <= first_bucket
                               ? all
                               : std::max(RingAllReduceSeconds(sc, std::min(bytes, a.bucket_mb * 1e6)),
                                          all - 2.0 / 3.0 * step_compute);
    // A linear batch warm-up takes fewer updates (trainer/algorithms/batch_size.h); the norm test's
    // growth depends on the gradients, so its rows assume the base batch (PlanScenario says so).
    double updates = steps;
    if (a.batch_schedule == core::BatchSchedule::kLinear) {
      trainer::BatchSchedule schedule(a, static_cast<int64_t>(steps));
      updates = 0;
      for (int64_t step = 0; step < static_cast<int64_t>(steps); ++updates) {
        schedule.BeginUpdate(step);
        step += schedule.multiple();
      }
    }
    r.time_s = critical_compute + updates * exposed;
    r.bytes_per_worker = updates * ring * (bytes + (adaptive ? 4.0 : 0.0));
    return r;
  }
  if (a.kind == core::AlgorithmKind::kAsyncDiloco) return PredictAsync(sc, a, w, steps, nominal, r);
  if (a.kind == core::AlgorithmKind::kDipaco) return PredictDipaco(sc, a, steps, critical_compute, r);
  // Each fragment every H steps: P synchronisations per H steps, each of a fragment's outer
  // gradient encoded as the trainer sends it, plus the contributor count and one join vote per
  // worker in fp32; each behind tau inner steps of compute.
  const double rounds = std::ceil(steps / static_cast<double>(a.inner_steps));
  const double fragment = std::ceil(w.params / static_cast<double>(how.fragments));
  const double bytes = static_cast<double>(core::Codec(how.codec).EncodedBytes(static_cast<int64_t>(fragment))) +
                       4.0 * (1 + m);
  const double reduce = core::Codec(how.codec).lossless() ? RingAllReduceSeconds(sc, bytes) : EncodedAllReduceSeconds(sc, bytes);
  const double exposed = std::max(0.0, reduce - how.overlap_steps * step_compute);
  r.syncs = static_cast<int64_t>(rounds) * how.fragments;
  // The last synchronisation has no inner steps left to hide behind.
  r.time_s = critical_compute + static_cast<double>(r.syncs) * exposed + (reduce - exposed);
  r.bytes_per_worker = static_cast<double>(r.syncs) * ring * bytes;
  return r;
}

// The scenario with every link's bandwidth multiplied by `k`.
core::Scenario ScaledBandwidth(core::Scenario sc, double k) {
  sc.network.link.bandwidth_bps *= k;
  sc.network.intra.bandwidth_bps *= k;
  for (auto& o : sc.network.overrides) o.link.bandwidth_bps *= k;
  for (auto& c : sc.network.schedule) c.bandwidth_bps *= k;
  sc.network.model = "analytic";
  return sc;
}

// The access-link bandwidth at which the entry reaches compute utilisation `target` (bisection on
// a log scale between 1 kbit/s and 100 Tbit/s); infinity if even that is not enough.
double BandwidthFor(const core::Scenario& sc, const core::AlgorithmSpec& a, const Workload& w, double flops,
                    const Streaming& how, double target) {
  auto util = [&](double k) {
    const Row r = Predict(ScaledBandwidth(sc, k), a, w, flops, how);
    return r.compute_s / r.time_s;
  };
  const double base = sc.network.link.bandwidth_bps;
  double lo = std::log(1e3 / base), hi = std::log(1e14 / base);
  if (util(std::exp(hi)) < target) return std::numeric_limits<double>::infinity();
  if (util(std::exp(lo)) >= target) return 1e3;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (util(std::exp(mid)) >= target ? hi : lo) = mid;
  }
  return base * std::exp(hi);
}

std::string Human(double v, const char* unit) {
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  if (!std::isfinite(v)) return "never";
  int i = 0;
  while (std::abs(v) >= 1000 && i < 6) {
    v /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %s%s", v, prefixes[i], unit);
  return buf;
}

std::string Duration(double s) {
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s < 2 * 3600) {
    std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  } else if (s < 2 * 86400) {
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f d", s / 86400);
  }
  return buf;
}

core::Result<Workload> MakeWorkload(const core::Scenario& sc, const PlanOptions& o) {
  Workload w;
  w.batch_tokens = static_cast<double>(sc.train.batch_size * sc.model.seq_len) * sc.workers.count;
  w.tokens = static_cast<double>(sc.train.steps) * w.batch_tokens;
  if (o.params.empty()) {
    // The scenario's own model: its exact parameter count and FLOPs (byte-level vocabulary).
    core::ModelSpec spec = sc.model;
    spec.vocab_size = 256;
    const trainer::ModelCost cost = trainer::CostOf(spec);
    w.params = static_cast<double>(cost.params);
    w.flops_per_token = cost.train_flops_per_token;
    w.label = sc.model.preset;
  } else {
    static const std::map<std::string, double> presets = {{"1B", 1e9}, {"10B", 1e10}, {"405B", 4.05e11}};
    const auto it = presets.find(o.params);
    char* end = nullptr;
    const double n = it != presets.end() ? it->second : std::strtod(o.params.c_str(), &end);
    if (it == presets.end() && (end == o.params.c_str() || *end != '\0' || !(n >= 1))) {
      return Status::InvalidArgument("--params: expected a count (7e9) or a preset (1B, 10B, 405B), got '" + o.params + "'");
    }
    w.params = n;
    w.flops_per_token = 6.0 * n;  // Kaplan et al.; App. A of the DiLoCo scaling laws
    w.label = Human(n, "") + " parameters";
    w.batch_tokens = 4194304;     // 2^22 tokens, the paper's order of magnitude
    w.tokens = 20.0 * n;          // Chinchilla-optimal unless told otherwise
  }
  if (o.tokens > 0) w.tokens = o.tokens;
  if (o.global_batch_tokens > 0) w.batch_tokens = o.global_batch_tokens;
  return w;
}

}  // namespace

core::Result<Plan> MakePlan(const core::Scenario& sc, const PlanOptions& o) {
  auto w = MakeWorkload(sc, o);
  if (!w.ok()) return w.status();
  auto bits_codec = CodecForBits(o.bits);
  if (!bits_codec.ok()) return bits_codec.status();
  Plan plan;
  plan.params = w->params;
  plan.flops_per_token = w->flops_per_token;
  plan.tokens = w->tokens;
  plan.batch_tokens = w->batch_tokens;
  plan.flops_per_worker = o.flops > 0 ? o.flops : sc.compute.device_flops;
  plan.label = w->label;
  std::vector<core::AlgorithmSpec> entries = sc.compare;
  if (entries.empty()) {
    core::AlgorithmSpec ddp;
    ddp.name = "ddp";
    entries.push_back(ddp);
  }
  for (const auto& a : entries) {
    // The entry as the scenario has it, and for DiLoCo a streaming variant with --fragments and --bits.
    std::vector<std::pair<std::string, Streaming>> variants;
    Streaming as_is{1, 0, a.outer_gradient};
    if (a.kind == core::AlgorithmKind::kStreamingDiloco) as_is = {a.fragments, static_cast<double>(a.overlap_steps), a.outer_gradient};
    variants.emplace_back(a.name, as_is);
    if (a.kind == core::AlgorithmKind::kDiloco && o.fragments > 0) {
      variants.emplace_back(a.name + "-streaming-p" + std::to_string(o.fragments) + "-" + std::to_string(o.bits) + "bit",
                            Streaming{o.fragments, o.overlap_steps, *bits_codec});
    }
    // An entry with its own depth (n_layers) has its own size and cost.
    Workload entry_w = *w;
    if (a.n_layers > 0 && o.params.empty()) {
      core::ModelSpec spec = sc.model;
      spec.vocab_size = 256;
      spec.n_layers = a.n_layers;
      const trainer::ModelCost cost = trainer::CostOf(spec);
      entry_w.params = static_cast<double>(cost.params);
      entry_w.flops_per_token = cost.train_flops_per_token;
    }
    for (const auto& [name, how] : variants) {
      Row r = Predict(sc, a, entry_w, plan.flops_per_worker, how);
      r.name = name;
      PlanRow row{r.name, r.time_s, r.compute_s, r.bytes_per_worker, r.syncs, {}};
      for (int t : {50, 80, 90, 95, 99}) {
        row.bandwidth_for[t] = BandwidthFor(sc, a, entry_w, plan.flops_per_worker, how, t / 100.0);
      }
      plan.rows.push_back(row);
    }
  }
  return plan;
}

Status PlanScenario(const core::Scenario& sc, const PlanOptions& o) {
  auto plan = MakePlan(sc, o);
  if (!plan.ok()) return plan.status();
  std::printf("plan: %s, %s tokens in steps of %s tokens, %d workers at %s each, network %s\n", plan->label.c_str(),
              Human(plan->tokens, "").c_str(), Human(plan->batch_tokens, "").c_str(), sc.workers.count,
              Human(plan->flops_per_worker, "FLOP/s").c_str(), sc.network.profile.c_str());
  std::printf("%-26s %10s %8s %12s %7s | bandwidth for compute utilisation 50/80/90/95/99%%\n", "entry", "time",
              "compute", "sent/worker", "syncs");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : plan->rows) {
    std::string needs;
    nlohmann::json bw = nlohmann::json::object();
    for (const auto& [t, b] : r.bandwidth_for) {
      needs += (needs.empty() ? "" : " / ") + Human(b, "bit/s");
      bw[std::to_string(t)] = std::isfinite(b) ? nlohmann::json(b) : nlohmann::json();
    }
    std::printf("%-26s %10s %7.0f%% %12s %7lld | %s\n", r.name.c_str(), Duration(r.time_s).c_str(),
                100 * r.compute_s / r.time_s, Human(r.bytes_per_worker, "B").c_str(), static_cast<long long>(r.syncs),
                needs.c_str());
    out.push_back({{"name", r.name}, {"time_s", r.time_s}, {"compute_s", r.compute_s},
                   {"compute_utilization", r.compute_s / r.time_s}, {"bytes_sent_per_worker", r.bytes_per_worker},
                   {"syncs", r.syncs}, {"bandwidth_bps_for_utilization", bw}});
  }
  const std::string dir = sc.output.dir + "/" + sc.name;
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  const nlohmann::json json = {{"scenario", sc.name}, {"params", plan->params}, {"tokens", plan->tokens},
                               {"batch_tokens", plan->batch_tokens}, {"flops_per_worker", plan->flops_per_worker},
                               {"entries", out}};
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(dir + "/plan.json", json.dump(2) + "\n"));
  std::printf("plan: %s/plan.json (\"never\": latency or compute bounds it below that utilisation)\n", dir.c_str());
  for (const auto& a : sc.compare) {
    if (a.kind == core::AlgorithmKind::kDdp && a.batch_schedule == core::BatchSchedule::kNormTest) {
      std::printf("plan: %s: the norm test's batch growth depends on the gradients; predicted at the base batch "
                  "(an upper bound on its time and bytes)\n", a.name.c_str());
    }
  }
  return Status::Ok();
}

}  // namespace narrows::tools
