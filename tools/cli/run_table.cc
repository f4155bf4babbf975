// The tables `narrows run` prints (tools/cli/run_command.h): the comparison at equal steps and at equal
// loss, the notes under it, and this host's line.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tools/cli/format.h"
#include "tools/cli/run_command.h"
#include "tools/cli/run_folders.h"

namespace narrows::tools {

void PrintHost(const nlohmann::json& summary) {
  if (!summary.contains("host")) return;
  const auto& h = summary["host"];
  const bool given = summary.contains("model") && summary["model"].value("flops_per_token_from", std::string()) ==
                                                     "model.flops_per_token";
  std::printf("this host: a worker's step took %.1f ms (median; 10-90%%: %.1f-%.1f ms), %s%s\n",
              1e3 * h.value("step_s", 0.0), 1e3 * h.value("step_s_p10", 0.0), 1e3 * h.value("step_s_p90", 0.0),
              Si(h.value("flops_per_s", 0.0), "FLOP/s").c_str(), given ? " (counting model.flops_per_token a token)" : "");
  if (!h.contains("modelled_flops_per_s")) return;
  std::printf("compute modelled at %s per worker (compute.device_flops)", Si(h.value("modelled_flops_per_s", 0.0), "FLOP/s").c_str());
  if (summary.contains("model")) {
    const auto& m = summary["model"];
    std::printf(", %s per token (%s)", Si(m.value("flops_per_token", 0.0), "FLOP").c_str(),
                m.value("flops_per_token_from", std::string()).c_str());
  }
  std::printf("; at this host's rate");
  const auto& planned = h.value("planned_speedup", nlohmann::json::object());
  if (planned.empty()) std::printf(" the planner predicts none of the entries");
  std::string untrusted;
  bool listed = false;
  for (const auto& [name, p] : planned.items()) {
    if (!p.contains("implied_here")) {
      untrusted += (untrusted.empty() ? "" : ", ") + name;
      continue;
    }
    std::printf("%s %s would be %.2fx faster (%.2fx emulated, times the planner's %.2fx here over %.2fx modelled)",
                listed ? ";" : "", name.c_str(), p.value("implied_here", 0.0), p.value("emulated", 0.0),
                p.value("host", 0.0), p.value("modelled", 0.0));
    listed = true;
  }
  if (!untrusted.empty()) {
    std::string off;
    const nlohmann::json errors = h.value("planner_error", nlohmann::json::object());
    for (const auto& [name, e] : errors.items()) {
      if (e.is_number()) off += (off.empty() ? "" : ", ") + name + Printf(" %+.1f%%", 100.0 * e.get<double>());
    }
    std::printf("%s no estimate for %s: the planner is off this run by more than %.0f%% at the modelled rate (%s), "
                "so a speed-up scaled by it would not be this host's",
                listed ? ";" : "", untrusted.c_str(), 100.0 * h.value("planner_trusted_within", 0.05), off.c_str());
  }
  std::printf("\n");
}

namespace {

// The curve column of an entry's row: "ok", or its instability in short.
std::string CurveNote(const nlohmann::json& r) {
  if (r.value("diverged", false)) return "DIVERGED";
  if (!r.contains("instability")) return "ok";
  const auto& u = r["instability"];
  const bool rise = u.value("kind", std::string()) == "rise";
  return Printf(rise ? "UNSTABLE: rose %+.1f%%" : "STALLED: %+.1f%%", 100.0 * u.value("change", 0.0)) +
         " from " + Seconds(u.value("from_s", 0.0)) + " s to " + Seconds(u.value("to_s", 0.0)) + " s";
}

// Below the table: what the curve column's words mean where one is used, and that the entries share
// untuned settings where they do.
void PrintSettingsNote(const nlohmann::json& summary) {
  bool unstable = false, diverged = false;
  for (const auto& r : summary.at("results")) {
    unstable = unstable || r.contains("instability");
    diverged = diverged || r.value("diverged", false);
  }
  if (diverged) {
    std::printf("curve: DIVERGED, the final validation loss is not finite, above the uniform guess ln(vocab), or 50%% "
                "above the first evaluation's: that entry counts as never reaching the target loss\n");
  }
  if (unstable) {
    std::printf("curve: UNSTABLE, the validation loss rose by more than %.0f%% between two evaluations; STALLED, it "
                "gained less than %.1f%% over %d evaluations and fell later: that entry's settings do not suit it\n",
                100 * kRiseFraction, 100 * kStallFraction, kStallEvaluations);
  }
  if (!summary.contains("settings") || summary["settings"].value("tuned", true)) return;
  const auto& s = summary["settings"];
  std::printf("untuned: every entry runs the scenario's train.lr %g and %lld warm-up steps; an entry may do better "
              "at its own (narrows tune FILE --grid train.lr=... --grid train.warmup_steps=... chooses each)\n",
              s.value("lr", 0.0), static_cast<long long>(s.value("warmup_steps", int64_t{0})));
}

void PrintNetworkModel(const nlohmann::json& summary) {
  const std::string line = NetworkModelLine(summary);
  if (!line.empty()) std::printf("%s\n", line.c_str());
}

}  // namespace

std::string NetworkModelLine(const nlohmann::json& summary) {
  if (!summary.contains("network_model")) return "";
  const auto& m = summary["network_model"];
  std::string line = "network: " + m.value("model", std::string()) + " model";
  if (m.contains("variant")) line += ", " + m["variant"].get<std::string>();
  if (m.contains("mean_error") && m["mean_error"].is_number()) {
    char figures[128];
    std::snprintf(figures, sizeof figures, ", %.1f%% mean error (%.1f%% max) against real TCP runs through the link emulator",
                  100 * m["mean_error"].get<double>(), 100 * m.value("max_error", 0.0));
    line += figures;
    if (m.contains("better")) line += "; " + m["better"].get<std::string>();
  } else {
    line += "; its error against real runs is not measured";
  }
  return line + " (" + m.value("measured", std::string("docs/results/fidelity.md")) + ")";
}

void PrintRetimed(const nlohmann::json& summary) {
  std::string names, from;
  for (const auto& r : summary.at("results")) {
    if (!r.contains("retimed_from")) continue;
    names += (names.empty() ? "" : ", ") + r.value("name", std::string());
    from = r["retimed_from"].get<std::string>();
  }
  if (!names.empty()) {
    std::printf("re-timed: %s trained once, in %s, whose scenario differs from this one in network keys alone; their "
                "losses are that training's, their times and bytes this network's\n",
                names.c_str(), from.c_str());
  }
  for (const auto& r : summary.at("results")) {
    if (r.contains("not_retimed")) {
      std::printf("%s: trained, not re-timed: %s\n", r.value("name", std::string()).c_str(),
                  r["not_retimed"].get<std::string>().c_str());
    }
  }
}

namespace {

// A deployment's times are those of the network its bytes crossed: says which where it was not the
// scenario's network:, and returns it for the line of relative times ("" without the record).
std::string PrintCarried(const nlohmann::json& summary) {
  std::string over;
  if (summary.contains("network_carried")) {
    const auto& n = summary["network_carried"];
    const std::string carried = n.value("network", std::string()), profile = n.value("profile", std::string());
    if (carried == "loopback") {
      std::printf("over loopback: the scenario's network (%s) was not emulated, so these times compare the "
                  "algorithms on this host's loopback, not on that network (launch --network scenario emulates it)\n",
                  profile.c_str());
      over = " over loopback";
    } else if (carried == "hosts") {
      std::printf("over the hosts' own network: the scenario's network (%s) applies to the emulator, not to these "
                  "times\n",
                  profile.c_str());
      over = " over the hosts' network";
    } else {
      over = " over the emulated " + profile;
    }
  }
  return over;
}

// The entries already below the target at their first evaluation: their times to target are bounds.
void PrintFirstEvaluations(const nlohmann::json& results) {
  std::string first_eval;
  for (const auto& r : results) {
    if (r.value("target_at_first_evaluation", false)) first_eval += (first_eval.empty() ? "" : ", ") + r.value("name", std::string());
  }
  if (!first_eval.empty()) {
    std::printf("note: %s already below the target loss at the first evaluation: each time to target is that "
                "evaluation's, a bound, not the time it was reached (evaluate more often: eval.every)\n",
                first_eval.c_str());
  }
}

// The baseline's bytes across islands over entry `r`'s (0 where either has none).
double WanRatio(const nlohmann::json& base, const nlohmann::json& r) {
  const double a = WanBytes(base), b = WanBytes(r);
  return a > 0 && b > 0 ? a / b : 0.0;  // NaN (no islands) compares false
}

// Under network.islands, what each entry sent across islands: the table's bytes count every link,
// the fast ones inside an island too.
void PrintWan(const nlohmann::json& results) {
  std::string line;
  for (const auto& r : results) {
    if (std::isnan(WanBytes(r))) continue;
    line += (line.empty() ? " " : "; ") + r.value("name", std::string()) + " " + Bytes(WanBytes(r));
  }
  if (!line.empty()) {
    std::printf("across islands (the whole run's bytes up every island's WAN link, summed; on the wire, packet "
                "headers included):%s\n",
                line.c_str());
  }
}

}  // namespace

void PrintComparison(const nlohmann::json& summary) {
  const bool wall = summary.value("clock", std::string()) == "wall";
  const auto& results = summary.at("results");
  auto num = [](const nlohmann::json& r, const char* key) {
    return r.contains(key) && r[key].is_number() ? r[key].get<double>() : -1.0;
  };
  const int w = NameWidth(results);
  size_t cw = 12;  // the collective's column: a space at least after the longest
  for (const auto& r : results) cw = std::max(cw, r.value("collective", std::string("-")).size() + 1);
  std::printf("%-*s %9s %9s %13s %12s %14s %11s %6s %8s %-*s %s\n", w, "entry", "val loss", "time (s)", "to target (s)",
              "sent/worker", "sent to target", "peak/round", "syncs", "compute", static_cast<int>(cw), "collective", "curve");
  for (const auto& r : results) {
    const double t = num(r, "time_to_target_s"), b = num(r, "bytes_to_target");
    char to_time[32] = "never";
    if (r.value("diverged", false)) std::snprintf(to_time, sizeof to_time, "diverged");
    if (t >= 0) std::snprintf(to_time, sizeof to_time, "%s", Seconds(t).c_str());
    std::printf("%-*s %9.4f %9s %13s %12s %14s %11s %6lld %7.0f%% %-*s %s\n", w, r.value("name", std::string()).c_str(),
                num(r, "final_val_loss"), Seconds(num(r, "time_s")).c_str(), to_time, Bytes(num(r, "bytes_sent_per_worker")).c_str(),
                b >= 0 ? Bytes(b).c_str() : "never", Bytes(std::max(0.0, num(r, "peak_bytes_per_round"))).c_str(),
                static_cast<long long>(num(r, "outer_syncs")), 100.0 * num(r, "compute_utilization"), static_cast<int>(cw),
                r.value("collective", std::string("-")).c_str(), CurveNote(r).c_str());
  }
  PrintWan(results);
  PrintSettingsNote(summary);
  PrintNetworkModel(summary);
  PrintRetimed(summary);
  if (results.size() < 2) {
    PrintHost(summary);
    return;
  }
  const size_t b = BaselineIndex(results);
  const std::string first = results[b].value("name", std::string());
  const std::string over = wall ? PrintCarried(summary) : "";
  std::printf("%s wall-clock time%s relative to %s:", wall ? "measured" : "virtual", over.c_str(), first.c_str());
  bool listed = false;
  for (size_t i = 0; i < results.size(); ++i) {
    if (i == b) continue;
    const double x = num(results[b], "time_s") / num(results[i], "time_s");
    std::printf("%s %s %.2fx %s", listed ? ";" : "", results[i].value("name", std::string()).c_str(), x >= 1 ? x : 1 / x,
                x >= 1 ? "faster" : "slower");
    listed = true;
  }
  const auto every = summary.value("eval_every", int64_t{0});
  const std::string cadence = every > 0 ? "interpolated between evaluations every " + std::to_string(every) + " steps"
                                        : "evaluated at the end only";
  std::printf("\nat equal loss (%.4f, %s; %s) relative to %s:", summary.value("target_loss", 0.0),
              summary.value("target_source", std::string()).c_str(), cadence.c_str(), first.c_str());
  if (results[b].value("diverged", false)) {
    std::printf(" none: %s diverged\n", first.c_str());
    PrintHost(summary);
    return;
  }
  listed = false;
  for (size_t i = 0; i < results.size(); ++i) {
    if (i == b) continue;
    const double speedup = num(results[i], "speedup_at_target"), saved = num(results[i], "bytes_saved_at_target");
    if (listed) std::printf(";");
    listed = true;
    if (speedup > 0) {
      std::printf(" %s %.2fx %s", results[i].value("name", std::string()).c_str(), speedup >= 1 ? speedup : 1 / speedup,
                  speedup >= 1 ? "faster" : "slower");
      if (saved > 0) std::printf(", %.3gx %s bytes", saved >= 1 ? saved : 1 / saved, saved >= 1 ? "fewer" : "more");
      const double wan = WanRatio(results[b], results[i]);
      if (wan > 0) std::printf(" (%.3gx %s across islands, whole run)", wan >= 1 ? wan : 1 / wan, wan >= 1 ? "fewer" : "more");
    } else {
      std::printf(" %s %s", results[i].value("name", std::string()).c_str(),
                  results[i].value("diverged", false) ? "diverged" : "-");
    }
  }
  std::printf("\n");
  PrintFirstEvaluations(results);
  PrintHost(summary);
}

}  // namespace narrows::tools
