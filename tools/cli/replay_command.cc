#include "tools/cli/replay_command.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "core/run_writer.h"
#include "core/scenario.h"
#include "tools/cli/format.h"
#include "tools/cli/run_command.h"
#include "tools/cli/run_folders.h"
#include "trainer/algorithms/plugin.h"

namespace narrows::tools {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

// A list of worker ranks under `key` of `event`, ascending; an error names the line.
Result<std::vector<int>> Ranks(const json& event, const char* key, const std::string& where) {
  const auto it = event.find(key);
  if (it == event.end() || !it->is_array()) return Status::InvalidArgument(where + ": expected a list \"" + key + "\"");
  std::vector<int> ranks;
  for (const auto& r : *it) {
    if (!r.is_number_integer() || r.get<int>() < 0) {
      return Status::InvalidArgument(where + ": \"" + key + "\" holds " + r.dump() + ", expected worker ranks");
    }
    ranks.push_back(r.get<int>());
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// Joiners welcomed at `step` (a round may welcome several, in one event or more).
void AddJoiners(int64_t step, const std::vector<int>& ranks, trainer::MembershipTrace* trace) {
  std::vector<int>& joined = trace->joiners[step];
  std::vector<int> both;
  std::set_union(joined.begin(), joined.end(), ranks.begin(), ranks.end(), std::back_inserter(both));
  joined = std::move(both);
}

std::string Parent(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string Base(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// step -> the digest of the global parameters after the outer step there, from an entry's
// outer_sync events (those that carry one).
std::map<int64_t, std::string> OuterDigests(const std::vector<json>& events) {
  std::map<int64_t, std::string> out;
  for (const auto& e : events) {
    const auto d = e.find("digest");
    const auto s = e.find("step");
    if (e.value("type", "") == "outer_sync" && d != e.end() && d->is_string() && s != e.end() && s->is_number_integer()) {
      out[s->get<int64_t>()] = d->get<std::string>();
    }
  }
  return out;
}

// step -> validation loss, from an entry's metrics lines.
std::map<int64_t, double> ValidationLosses(const std::vector<json>& metrics) {
  std::map<int64_t, double> out;
  for (const auto& m : metrics) {
    const auto v = m.find("val_loss");
    const auto s = m.find("step");
    if (v != m.end() && v->is_number() && s != m.end() && s->is_number_integer()) out[s->get<int64_t>()] = v->get<double>();
  }
  return out;
}

}  // namespace

Result<trainer::MembershipTrace> ReadMembershipTrace(const std::vector<json>& events, const std::string& path) {
  trainer::MembershipTrace trace;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string type = e.value("type", "");
    if (type != "outer_sync" && type != "join") continue;
    const std::string where = path + ": event " + std::to_string(i + 1) + " (" + type + ")";
    const auto step = e.find("step");
    if (step == e.end() || !step->is_number_integer() || step->get<int64_t>() < 0) {
      return Status::InvalidArgument(where + ": expected a step");
    }
    auto ranks = Ranks(e, type == "join" ? "workers" : "participants", where);
    if (!ranks.ok()) return ranks.status();
    if (type == "outer_sync") {
      if (const auto n = e.find("inner_steps"); n != e.end()) {  // DyLU's plan for the next round
        std::vector<int64_t>& planned = trace.inner_steps[step->get<int64_t>()];
        planned.clear();
        if (!n->is_array()) return Status::InvalidArgument(where + ": \"inner_steps\" is not a list");
        for (const auto& v : *n) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0) {
            return Status::InvalidArgument(where + ": \"inner_steps\" holds " + v.dump() + ", expected step counts");
          }
          planned.push_back(v.get<int64_t>());
        }
      }
      auto [it, fresh] = trace.members.emplace(step->get<int64_t>(), *ranks);
      if (!fresh && it->second != *ranks) {
        return Status::InvalidArgument(where + ": a second outer step at step " + std::to_string(it->first) +
                                       " with other participants");
      }
    } else {
      AddJoiners(step->get<int64_t>(), *ranks, &trace);
    }
  }
  if (trace.members.empty()) return Status::InvalidArgument(path + ": no outer_sync events: nothing to replay");
  return trace;
}

Result<trainer::MembershipTrace> ReadStepMembershipTrace(const std::vector<json>& events, const std::string& path,
                                                         int workers, int64_t steps) {
  std::map<int64_t, std::vector<int>> survivors;  // the last drop's at each step
  trainer::MembershipTrace trace;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string type = e.value("type", "");
    const bool drop = type == "crash" || type == "evicted";
    if (type == "repeated") {  // a collective repeated over the same group
      if (const auto step = e.find("step"); step != e.end() && step->is_number_integer()) trace.repeated.insert(step->get<int64_t>());
      continue;
    }
    if (!drop && type != "join") continue;
    const std::string where = path + ": event " + std::to_string(i + 1) + " (" + type + ")";
    const auto step = e.find("step");
    if (step == e.end() || !step->is_number_integer() || step->get<int64_t>() < 0 || step->get<int64_t>() >= steps) {
      return Status::InvalidArgument(where + ": expected a step below " + std::to_string(steps));
    }
    auto ranks = Ranks(e, drop ? "survivors" : "workers", where);
    if (!ranks.ok()) return ranks.status();
    if (drop) {
      survivors[step->get<int64_t>()] = *ranks;
      trace.repeated.insert(step->get<int64_t>());
    } else {
      AddJoiners(step->get<int64_t>(), *ranks, &trace);
    }
  }
  std::vector<int> group;
  for (int r = 0; r < workers; ++r) group.push_back(r);
  for (int64_t s = 0; s < steps; ++s) {
    if (const auto j = trace.joiners.find(s); j != trace.joiners.end()) {
      std::vector<int> both;
      std::set_union(group.begin(), group.end(), j->second.begin(), j->second.end(), std::back_inserter(both));
      group = both;
    }
    if (const auto d = survivors.find(s); d != survivors.end()) group = d->second;
    trace.members[s + 1] = group;  // the round [s, s + 1) ends at s + 1
  }
  return trace;
}

Result<trainer::MembershipTrace> ReadArrivalTrace(const std::vector<json>& events, const std::string& path, int workers) {
  trainer::MembershipTrace trace;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string type = e.value("type", "");
    const std::string where = path + ": event " + std::to_string(i + 1) + " (" + type + ")";
    if (type == "crash" || type == "join" || type == "evicted") {
      return Status::InvalidArgument(where + ": async-diloco is replayed from runs without crashes, evictions or "
                                     "restarts (what a killed worker had computed is not in the events)");
    }
    if (type != "arrival") continue;
    const auto w = e.find("worker");
    if (w == e.end() || !w->is_number_integer() || w->get<int>() < 0 || w->get<int>() >= workers) {
      return Status::InvalidArgument(where + ": expected a worker below " + std::to_string(workers));
    }
    trainer::AsyncArrival a;
    a.worker = w->get<int>();
    if (const auto n = e.find("next_inner_steps"); n != e.end()) {
      if (!n->is_number_integer() || n->get<int64_t>() <= 0) {
        return Status::InvalidArgument(where + ": \"next_inner_steps\" holds " + n->dump() + ", expected a step count");
      }
      a.next_inner_steps = n->get<int64_t>();
    }
    trace.arrivals.push_back(a);
  }
  if (trace.arrivals.empty()) return Status::InvalidArgument(path + ": no arrival events: nothing to replay");
  return trace;
}

namespace {

// The membership trace of `e`, an entry that ran `plugin`'s algorithm, from its events (`events`:
// their file): each algorithm says what its events record of its membership.
Result<trainer::MembershipTrace> TraceOf(const trainer::AlgorithmPlugin& plugin, const Entry& e, const std::string& events,
                                         const core::Scenario& sc) {
  core::Result<trainer::MembershipTrace> trace = Status::Internal("unread");
  switch (plugin.replay_trace) {
    case trainer::ReplayTrace::kSteps:
      trace = ReadStepMembershipTrace(e.events, events, sc.workers.count, sc.train.steps);
      break;
    case trainer::ReplayTrace::kArrivals:
      trace = ReadArrivalTrace(e.events, events, sc.workers.count);
      break;
    case trainer::ReplayTrace::kRounds:
      trace = ReadMembershipTrace(e.events, events);
      break;
  }
  return trace;
}

// Every entry of the run `live` with its trace in `run->replay` and itself in `*by_name`; per entry
// its agreement, the syncs filled in.
Result<std::vector<ReplayAgreement>> ReadTraces(const std::string& run_dir, const Run& live, const core::Scenario& sc,
                                                RunOptions* run, std::map<std::string, const Entry*>* by_name) {
  std::vector<ReplayAgreement> agreements;
  for (const Entry& e : live.entries) {
    const std::string name = e.summary.value("name", "");
    const std::string events = run_dir + "/" + name + "/events.jsonl";
    const std::string algorithm = e.summary.value("algorithm", "");
    const trainer::AlgorithmPlugin* plugin = trainer::FindAlgorithm(algorithm);
    if (plugin == nullptr) {
      return Status::InvalidArgument(run_dir + ": entry '" + name + "' ran algorithm '" + algorithm +
                                     "', which this build of narrows does not have");
    }
    auto trace = TraceOf(*plugin, e, events, sc);
    if (!trace.ok()) return trace.status();
    ReplayAgreement a;
    a.entry = name;
    a.syncs = static_cast<int>(plugin->replay_trace == trainer::ReplayTrace::kArrivals ? trace->arrivals.size()
                                                                                        : trace->members.size());
    agreements.push_back(a);
    run->replay[name] = std::make_shared<const trainer::MembershipTrace>(std::move(*trace));
    (*by_name)[name] = &e;
  }
  return agreements;
}

// How the replay's entry `mine` agrees with the run's `theirs`: the validation losses evaluation by
// evaluation, the global parameters after each outer step both took, and the final losses.
void Compare(const Entry& theirs, const Entry& mine, ReplayAgreement* a) {
  const auto their_losses = ValidationLosses(theirs.metrics), ours = ValidationLosses(mine.metrics);
  for (const auto& [step, loss] : their_losses) {
    ++a->evaluations;
    const auto it = ours.find(step);
    const double diff = it == ours.end() ? INFINITY : std::abs(it->second - loss);
    if (diff == 0.0) {
      ++a->equal;
    } else if (a->first_differing_step < 0) {
      a->first_differing_step = step;
    }
    a->max_abs_difference = std::max(a->max_abs_difference, diff);
  }
  const auto run_digests = OuterDigests(theirs.events), replay_digests = OuterDigests(mine.events);
  for (const auto& [step, digest] : run_digests) {
    const auto it = replay_digests.find(step);
    if (it == replay_digests.end()) continue;  // an outer step the replay took elsewhere is an evaluation's to tell
    ++a->digests;
    if (it->second == digest) {
      ++a->digests_equal;
    } else if (a->first_differing_outer_step < 0) {
      a->first_differing_outer_step = step;
    }
  }
  a->final_live = theirs.summary.value("final_val_loss", NAN);
  a->final_replay = mine.summary.value("final_val_loss", NAN);
}

// An entry's line of replay.json.
json AgreementJson(const ReplayAgreement& a) {
  return {{"entry", a.entry},
          {"syncs", a.syncs},
          {"evaluations", a.evaluations},
          {"equal", a.equal},
          {"first_differing_step", a.first_differing_step},
          {"outer_steps_compared", a.digests},
          {"outer_steps_equal", a.digests_equal},
          {"first_differing_outer_step", a.first_differing_outer_step},
          {"max_abs_difference", std::isfinite(a.max_abs_difference) ? json(a.max_abs_difference) : json(nullptr)},
          {"final_val_loss", a.final_live},
          {"final_val_loss_replayed", a.final_replay},
          {"bit_for_bit", a.Equal()}};
}

}  // namespace

Result<std::vector<ReplayAgreement>> ReplayRun(const std::string& run_dir, const ReplayOptions& options) {
  auto live = LoadRun(run_dir);
  if (!live.ok()) return live.status();
  if (live->clock != "wall") {
    return Status::InvalidArgument(run_dir + ": not a deployment's run (its clock is " + live->clock +
                                   "): replay takes the membership of narrows launch or narrows worker");
  }
  const std::string out = options.output.empty() ? run_dir + "-replay" : options.output;
  auto overrides = core::ParseOverrides({"name=" + Base(out), "output.dir=" + Parent(out), "seeds=1"});
  if (!overrides.ok()) return overrides.status();
  auto sc = core::LoadScenario(run_dir + "/scenario.yaml", *overrides);
  if (!sc.ok()) return sc.status();

  RunOptions run;
  run.progress = options.progress;
  run.data_root = options.data_root;
  std::map<std::string, const Entry*> by_name;
  auto agreements = ReadTraces(run_dir, *live, *sc, &run, &by_name);
  if (!agreements.ok()) return agreements.status();
  for (const auto& entry : Entries(*sc)) {
    if (!run.replay.count(entry.name)) {
      return Status::InvalidArgument(run_dir + ": has no results for entry '" + entry.name +
                                     "' of its scenario: replay runs every entry of compare:");
    }
  }
  auto summary = RunOneSeed(*sc, run);
  if (!summary.ok()) return summary.status();
  auto replayed = LoadRun(out);
  if (!replayed.ok()) return replayed.status();

  json report = {{"run", run_dir}, {"replay", out}, {"entries", json::array()}};
  for (ReplayAgreement& a : *agreements) {
    const Entry* mine = nullptr;
    for (const Entry& e : replayed->entries) {
      if (e.summary.value("name", "") == a.entry) mine = &e;
    }
    if (mine == nullptr) return Status::Internal(out + ": the replay has no entry '" + a.entry + "'");
    Compare(*by_name[a.entry], *mine, &a);
    report["entries"].push_back(AgreementJson(a));
  }
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(out + "/replay.json", report.dump(2) + "\n"));
  return agreements;
}

Status ReplayCommand(const std::string& run_dir, const ReplayOptions& options) {
  auto agreements = ReplayRun(run_dir, options);
  if (!agreements.ok()) return agreements.status();
  // syncs: what the trace gave, per entry: outer steps, steps (DDP) or pushes (async DiLoCo).
  std::printf("%-16s %7s %21s %14s %14s  %s\n", "entry", "syncs", "evaluations equal", "final (run)",
              "final (replay)", "agreement");
  bool all = true;
  for (const auto& a : *agreements) {
    all = all && a.Equal();
    std::string verdict = "bit for bit";
    if (!a.Equal()) {
      verdict = a.first_differing_step >= 0 ? "differs from step " + std::to_string(a.first_differing_step) + " (largest gap " +
                                                  Printf("%.3g", a.max_abs_difference) + ")"
                                            : "differs";
      if (a.first_differing_outer_step >= 0) {
        verdict += "; parameters first differ after the outer step at " + std::to_string(a.first_differing_outer_step) + " (" +
                   std::to_string(a.digests_equal) + " of " + std::to_string(a.digests) + " outer steps equal)";
      }
    }
    std::printf("%-16s %7d %21s %14.9f %14.9f  %s\n", a.entry.c_str(), a.syncs,
                (std::to_string(a.equal) + " of " + std::to_string(a.evaluations)).c_str(), a.final_live, a.final_replay,
                verdict.c_str());
  }
  const std::string out = options.output.empty() ? run_dir + "-replay" : options.output;
  std::printf("replay: %s (replay.json)\n", out.c_str());
  if (!all) return Status::Aborted("the replay differs from the run (its losses or its outer steps' parameters)");
  return Status::Ok();
}

}  // namespace narrows::tools
