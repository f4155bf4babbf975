#include "tools/cli/run_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "core/progress.h"
#include "core/result_record.h"
#include "core/run_writer.h"
#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "tools/cli/invariants.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/report_command.h"
#include "tools/cli/run_folders.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/experiment.h"
#include "trainer/warm_start.h"

namespace narrows::tools {

std::vector<core::AlgorithmSpec> Entries(const core::Scenario& sc) {
  std::vector<core::AlgorithmSpec> entries = sc.compare;
  if (entries.empty()) {
    std::string algorithm;
    for (const auto* p : trainer::RegisteredAlgorithms()) {
      if (p->default_entry) algorithm = p->parser.name;
    }
    NARROWS_CHECK(!algorithm.empty()) << "no algorithm plug-in is the default entry";
    auto entry = core::ParseEntry("{algorithm: " + algorithm + "}", sc, "the default entry");
    NARROWS_CHECK(entry.ok()) << entry.status().ToString();
    entries.push_back(*entry);
    entries.back().baseline = true;
  }
  for (auto& e : entries) {
    if (e.collective == core::CollectiveKind::kAuto) e = ChooseCollective(sc, e);
  }
  return entries;
}

nlohmann::json EntryJson(const trainer::EntryResult& r, double host_s) {
  nlohmann::json j = {{"name", r.name},
                      {"algorithm", r.algorithm},
                      {"collective", r.collective},
                      {"workers", r.workers},
                      {"final_val_loss", r.final_val_loss},
                      {"final_val_loss_se", std::isfinite(r.final_val_loss_se) ? nlohmann::json(r.final_val_loss_se)
                                                                               : nlohmann::json()},
                      {"time_s", r.virtual_time_s},
                      {"virtual_time_s", r.virtual_time_s},
                      {"bytes_sent_per_worker", r.bytes_sent_per_worker},
                      {"peak_bytes_per_round", r.peak_bytes_per_round},
                      {"outer_syncs", r.outer_syncs},
                      {"steps", r.steps},
                      {"tokens", r.tokens},
                      {"compute_utilization", r.compute_utilization},
                      {"host_time_s", host_s},
                      {"host_compute_s", r.host_compute_s}};
  if (!r.final_val_loss_by_domain.empty()) {
    nlohmann::json by_domain = nlohmann::json::object();
    for (const auto& [name, loss] : r.final_val_loss_by_domain) by_domain[name] = loss;
    j["final_val_loss_by_domain"] = by_domain;
  }
  if (r.host_step_s > 0) {
    j["host_step_s"] = {{"median", r.host_step_s}, {"p10", r.host_step_s_p10}, {"p90", r.host_step_s_p90},
                        {"flops", r.step_flops}};
  }
  return j;  // the equal-quality figures: AddEqualQuality, over every entry
}

nlohmann::json LinksJson(const sim::NetworkModel& network, double seconds) {
  nlohmann::json links = nlohmann::json::array();
  const sim::LinkCounters* counters = network.counters();
  if (counters == nullptr) return nullptr;
  const auto& topology = network.topology().links();
  for (size_t l = 0; l < topology.size() && l < counters->links().size(); ++l) {
    const auto& c = counters->links()[l];
    const double bytes = c.bits / 8;
    links.push_back({{"link", topology[l].name},
                     {"bandwidth_bps", topology[l].bandwidth_bps},
                     {"packets", c.packets},
                     {"bytes", bytes},
                     {"mean_bps", seconds > 0 ? c.bits / seconds : 0.0},
                     {"utilization", seconds > 0 ? c.bits / seconds / topology[l].bandwidth_bps : 0.0},
                     {"dropped_loss", c.dropped_loss},
                     {"dropped_queue", c.dropped_queue},
                     {"queue_delay_mean_s", c.queued > 0 ? nlohmann::json(c.queue_delay_sum_s / static_cast<double>(c.queued))
                                                         : nlohmann::json()},
                     {"queue_delay_max_s", c.queued > 0 ? nlohmann::json(c.queue_delay_max_s) : nlohmann::json()},
                     {"bits_per_bin", c.bins}});
  }
  return {{"seconds", seconds}, {"bin_s", counters->bin_s()}, {"links", links}};
}

nlohmann::json NetworkSummary(const nlohmann::json& links) {
  const auto& all = links.at("links");
  std::vector<const nlohmann::json*> sorted;
  double bytes = 0, dropped_loss = 0, dropped_queue = 0, wan_bytes = 0;
  bool islands = false;
  for (const auto& l : all) {
    sorted.push_back(&l);
    bytes += l.at("bytes").get<double>();
    if (l.at("link").get<std::string>().rfind("wan-up:", 0) == 0) {  // network.islands' links out of each island
      islands = true;
      wan_bytes += l.at("bytes").get<double>();
    }
    dropped_loss += l.at("dropped_loss").get<double>();
    dropped_queue += l.at("dropped_queue").get<double>();
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const nlohmann::json* a, const nlohmann::json* b) {
    return a->at("utilization").get<double>() > b->at("utilization").get<double>();
  });
  nlohmann::json busiest = nlohmann::json::array();
  for (size_t i = 0; i < sorted.size() && i < 5; ++i) {
    const nlohmann::json& l = *sorted[i];
    busiest.push_back({{"link", l.at("link")},
                       {"utilization", l.at("utilization")},
                       {"bytes", l.at("bytes")},
                       {"dropped_loss", l.at("dropped_loss")},
                       {"dropped_queue", l.at("dropped_queue")},
                       {"queue_delay_mean_s", l.at("queue_delay_mean_s")}});
  }
  nlohmann::json summary = {{"link_bytes", bytes},
                            {"dropped_loss", dropped_loss},
                            {"dropped_queue", dropped_queue},
                            {"links", all.size()},
                            {"busiest_links", busiest}};
  if (islands) summary["wan_bytes"] = wan_bytes;
  return summary;
}

namespace {

// Bits a link's histogram holds in [from, to): whole bins, and the overlapped share of partial ones.
double BitsBetween(const nlohmann::json& bins, double bin_s, double from, double to) {
  double bits = 0;
  if (!(to > from) || !(bin_s > 0)) return 0;
  const auto first = static_cast<size_t>(std::max(0.0, from / bin_s));
  for (size_t i = first; i < bins.size(); ++i) {
    const double lo = static_cast<double>(i) * bin_s, hi = lo + bin_s;
    if (lo >= to) break;
    const double overlap = std::min(hi, to) - std::max(lo, from);
    if (overlap > 0) bits += bins[i].get<double>() * overlap / bin_s;
  }
  return bits;
}

}  // namespace

core::Status AddNetworkToMetrics(const std::string& metrics_path, const nlohmann::json& links) {
  std::ifstream in(metrics_path);
  if (!in) return core::Status::Ok();  // nothing recorded
  const double bin_s = links.at("bin_s").get<double>();
  const auto& all = links.at("links");
  std::string out;
  double previous = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json m;
    try {
      m = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      out += line + "\n";  // a torn line stays as it was
      continue;
    }
    if (!m.is_object() || !m.contains("virtual_time_s")) {
      out += line + "\n";
      continue;
    }
    const double now = m["virtual_time_s"].get<double>(), span = now - previous;
    double bytes = 0, utilization_sum = 0, busiest = -1;
    int counted = 0;
    std::string busiest_link;
    for (const auto& l : all) {
      const double bits = BitsBetween(l.at("bits_per_bin"), bin_s, previous, now);
      bytes += bits / 8;
      const double bandwidth = l.at("bandwidth_bps").get<double>();
      if (!(bandwidth > 0) || !(span > 0)) continue;
      const double u = bits / span / bandwidth;
      utilization_sum += u;
      ++counted;
      if (u > busiest) {
        busiest = u;
        busiest_link = l.at("link").get<std::string>();
      }
    }
    nlohmann::json network = {{"link_bytes", bytes}};
    if (counted > 0) {
      network["mean_utilization"] = utilization_sum / counted;
      network["busiest_link"] = busiest_link;
      network["busiest_utilization"] = busiest;
    }
    m["network"] = network;
    out += m.dump() + "\n";
    previous = now;
  }
  return core::WriteFileAtomic(metrics_path, out);
}

namespace {

// The corpus's domains and their sizes, on one line.
void PrintDomains(const trainer::Dataset& data, std::FILE* out) {
  std::fprintf(out, "data: %.1fM tokens in %zu domains:", static_cast<double>(data.corpus.num_tokens()) / 1e6,
               data.corpus.domains().size());
  for (const auto& d : trainer::DomainSizes(data)) {
    std::fprintf(out, " %s %.2fM (%.2fM validation)", d.name.c_str(), static_cast<double>(d.tokens) / 1e6,
                 static_cast<double>(d.val_tokens) / 1e6);
  }
  std::fprintf(out, "\n");
}

}  // namespace

std::string WhyNotRetimed(const core::Scenario& sc, const core::AlgorithmSpec& entry, const std::string& from,
                          std::string* trained) {
  if (sc.compute.mode != core::ComputeMode::kModelled) return "its compute is measured (compute.mode: modelled re-times)";
  const trainer::AlgorithmPlugin* plugin = trainer::FindAlgorithm(entry.algorithm);
  if (plugin == nullptr || !plugin->retime) return entry.algorithm + " cannot be re-timed";
  if (std::string why = plugin->retime(entry); !why.empty()) return why;
  auto there = ReadText(from + "/scenario.yaml");
  if (!there.ok()) return "no scenario in " + from;
  const auto a = core::ResultKeys(*there), b = core::ResultKeys(sc.resolved_yaml);
  for (const auto& [key, value] : b) {
    const auto it = a.find(key);
    if ((it == a.end() || it->second != value) && key.rfind("network.", 0) != 0) return key + " differs from " + from + "'s";
  }
  for (const auto& [key, value] : a) {
    if (b.count(key) == 0 && key.rfind("network.", 0) != 0) return key + " differs from " + from + "'s";
  }
  auto record = ReadText(from + "/" + entry.name + "/trained.json");
  if (!record.ok()) return "no training record in " + from + "/" + entry.name;
  *trained = std::move(*record);
  return "";
}

namespace {

// One seed's run of every entry: what its steps share, and each entry's experiment.
struct SeedRun {
  const core::Scenario& sc;
  const RunOptions& options;
  std::shared_ptr<const trainer::Dataset> data;
  std::vector<core::AlgorithmSpec> entries;
  std::vector<std::unique_ptr<trainer::Experiment>> experiments;
  std::vector<std::string> trained;      // the training record each re-timed entry takes
  std::vector<std::string> not_retimed;  // why an entry trains although asked to re-time
  std::string run_dir;
  std::string warm_start;  // the model file every entry starts from ("": none)
};

// The experiment of `entry`: timed only (re-timed from another run's training) or trained; under a
// deployment's membership where the options replay one.
core::Result<std::unique_ptr<trainer::Experiment>> MakeExperiment(const SeedRun& seed, const core::AlgorithmSpec& entry,
                                                                  bool timing_only) {
  trainer::ExperimentOptions eo;
  eo.timing_only = timing_only;
  if (!seed.options.replay.empty()) {
    const auto trace = seed.options.replay.find(entry.name);
    if (trace == seed.options.replay.end()) return core::Status::InvalidArgument(entry.name + ": no membership trace to replay");
    eo.membership = trainer::Membership::kReplay;
    eo.trace = trace->second;
  }
  return trainer::Experiment::Create(seed.sc, entry, seed.data, eo);
}

// Every entry's experiment, before anything is written: with options.retime_from, each entry that
// can be re-timed from there (WhyNotRetimed) is timed only; the others say why they train.
core::Status CreateExperiments(SeedRun* seed) {
  const RunOptions& options = seed->options;
  seed->trained.assign(seed->entries.size(), "");
  seed->not_retimed.assign(seed->entries.size(), "");
  for (size_t i = 0; i < seed->entries.size(); ++i) {
    bool retime = false;
    if (!options.retime_from.empty()) {
      seed->not_retimed[i] = options.replay.empty()
                                 ? WhyNotRetimed(seed->sc, seed->entries[i], options.retime_from, &seed->trained[i])
                                 : "a replay follows a deployment's membership";
      retime = seed->not_retimed[i].empty();
      if (!retime && options.progress != nullptr) {
        std::fprintf(options.progress, "%s: trained, not re-timed from %s: %s\n", seed->entries[i].name.c_str(),
                     options.retime_from.c_str(), seed->not_retimed[i].c_str());
      }
    }
    auto e = MakeExperiment(*seed, seed->entries[i], retime);
    if (!e.ok()) return e.status();
    seed->experiments.push_back(std::move(e).value());
  }
  return core::Status::Ok();
}

// The scenario's warm start, prepared (or found in the cache) and given to every entry.
core::Status SetUpWarmStart(SeedRun* seed) {
  const core::Scenario& sc = seed->sc;
  if (!sc.warm_start.enabled()) return core::Status::Ok();
  const std::string cache =
      seed->options.warm_start_dir.empty() ? sc.output.dir + "/warm_start" : seed->options.warm_start_dir;
  auto path = trainer::PrepareWarmStart(sc, *seed->data, cache, seed->options.progress);
  if (!path.ok()) return path.status();
  seed->warm_start = *path;
  for (auto& e : seed->experiments) NARROWS_RETURN_IF_ERROR(e->SetWarmStart(seed->warm_start));
  return core::Status::Ok();
}

// Runs `experiment`'s workers on a fresh emulator under the scenario's network, kept in `*engine`.
void Emulate(const core::Scenario& sc, trainer::Experiment& experiment, std::unique_ptr<emu::Engine>* engine) {
  *engine = std::make_unique<emu::Engine>(sc.workers.count, emu::NetworkFromScenario(sc));
  emu::Engine& emulator = **engine;
  emulator.SetStallTimeout(sc.network.stall_timeout_s);
  emulator.Run([&](int rank) { experiment.RunWorker(rank, emulator.endpoint(rank)); });
}

// Entry `i` was re-timed, but its timed run did other work than the training (`adopted` says what):
// its losses would not be its own, so it trains after all.
core::Status TrainAfterAll(SeedRun* seed, size_t i, const core::Status& adopted, std::unique_ptr<emu::Engine>* engine) {
  if (seed->options.progress != nullptr) {
    std::fprintf(seed->options.progress, "\n%s: trained after all: %s\n", seed->entries[i].name.c_str(),
                 adopted.message().c_str());
  }
  auto e = MakeExperiment(*seed, seed->entries[i], false);
  if (!e.ok()) return e.status();
  seed->experiments[i] = std::move(e).value();
  if (!seed->warm_start.empty()) NARROWS_RETURN_IF_ERROR(seed->experiments[i]->SetWarmStart(seed->warm_start));
  seed->trained[i].clear();
  seed->not_retimed[i] = adopted.message();
  Emulate(seed->sc, *seed->experiments[i], engine);
  return core::Status::Ok();
}

// The progress line of an entry's run: virtual time, and the loss where it is the training's.
trainer::Experiment::ProgressFn ShowProgress(core::Progress* progress, bool timed) {
  return [progress, timed](int64_t steps, double virtual_s, double loss) {
    char detail[96];
    if (timed) {  // a timed run's losses are not the training's until it takes them
      std::snprintf(detail, sizeof detail, "virtual %.1f s", virtual_s);
    } else {
      std::snprintf(detail, sizeof detail, "virtual %.1f s | loss %.3f", virtual_s, loss);
    }
    progress->Update(steps, detail);
  };
}

// An entry's links.json (LinksJson), and the network per line of its metrics.jsonl where it finished;
// nothing where the network model keeps no counters.
core::Status WriteLinks(const std::string& entry_dir, const nlohmann::json& links, bool finished) {
  if (links.is_null()) return core::Status::Ok();
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(entry_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(entry_dir + "/links.json", links.dump() + "\n"));
  if (finished) NARROWS_RETURN_IF_ERROR(AddNetworkToMetrics(entry_dir + "/metrics.jsonl", links));
  return core::Status::Ok();
}

// Entry `i`, run (re-timed, or trained) and finished into its folder: its line of summary.json.
// `*engine` keeps its emulator, whose network the links were read from.
core::Result<nlohmann::json> RunEntry(SeedRun* seed, size_t i, std::unique_ptr<emu::Engine>* engine) {
  const core::Scenario& sc = seed->sc;
  const RunOptions& options = seed->options;
  const std::string entry_dir = seed->run_dir + "/" + seed->entries[i].name;
  const bool timed = !seed->trained[i].empty();
  const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(seed->entries.size()) + "] " +
                            seed->entries[i].name + (timed ? " re-timed, step" : " step");
  core::Progress progress(label, sc.train.steps, options.progress);
  seed->experiments[i]->SetProgress(ShowProgress(&progress, timed));
  const auto start = std::chrono::steady_clock::now();
  Emulate(sc, *seed->experiments[i], engine);
  if (timed && seed->experiments[i]->status().ok()) {
    const core::Status adopted = seed->experiments[i]->AdoptTraining(seed->trained[i]);
    if (!adopted.ok()) NARROWS_RETURN_IF_ERROR(TrainAfterAll(seed, i, adopted, engine));
  }
  trainer::Experiment& experiment = *seed->experiments[i];
  const bool retimed = !seed->trained[i].empty();
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.keep_training && !retimed && experiment.status().ok()) {
    NARROWS_RETURN_IF_ERROR(core::MakeDirs(entry_dir));
    NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(entry_dir + "/trained.json", experiment.ExportPart() + "\n"));
  }
  auto r = experiment.Finish(entry_dir);
  double seconds = r.ok() ? r->virtual_time_s : 0.0;
  if (!r.ok()) {  // what the links carried until the failure is kept, to diagnose it
    for (int w = 0; w < sc.workers.count; ++w) seconds = std::max(seconds, (*engine)->clock_of(w));
  }
  const nlohmann::json links = LinksJson((*engine)->network(), seconds);
  NARROWS_RETURN_IF_ERROR(WriteLinks(entry_dir, links, r.ok()));
  if (!r.ok()) return r.status();
  char detail[128];
  std::snprintf(detail, sizeof detail, "val loss %.4f | %.1f s virtual | %.1f s on this host", r->final_val_loss,
                r->virtual_time_s, host_s);
  progress.Finish(detail);
  nlohmann::json line = EntryJson(*r, host_s);
  if (retimed) line["retimed_from"] = options.retime_from;
  if (!seed->not_retimed[i].empty()) line["not_retimed"] = seed->not_retimed[i];
  if (!links.is_null()) line["network"] = NetworkSummary(links);
  return line;
}

}  // namespace

core::Result<nlohmann::json> RunOneSeed(const core::Scenario& sc, const RunOptions& options) {
  auto data = trainer::LoadDataset(sc, options.data_root);
  if (!data.ok()) return data.status();
  if (options.progress != nullptr && (*data)->corpus.domains().size() > 1) PrintDomains(**data, options.progress);
  SeedRun seed{sc, options, *data, Entries(sc), {}, {}, {}, sc.output.dir + "/" + sc.name, ""};
  NARROWS_RETURN_IF_ERROR(CreateExperiments(&seed));
  // Inputs are valid: from here on the run folder is ours.
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(seed.run_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(seed.run_dir + "/scenario.yaml", sc.resolved_yaml));
  NARROWS_RETURN_IF_ERROR(SetUpWarmStart(&seed));

  nlohmann::json results = nlohmann::json::array(), summary = {{"results", nlohmann::json::array()}};
  for (size_t i = 0; i < seed.entries.size(); ++i) {
    std::unique_ptr<emu::Engine> engine;  // the entry's emulator, released once its summary is written
    auto line = RunEntry(&seed, i, &engine);
    if (!line.ok()) return line.status();
    results.push_back(*line);
    // Rewritten after every entry, so a long comparison keeps what it finished.
    auto written = WriteSummary(sc, seed.run_dir, results, "virtual", false);
    if (!written.ok()) return written.status();
    summary = *written;
  }
  NARROWS_RETURN_IF_ERROR(CheckFigures(summary, seed.run_dir));
  return summary;
}


core::Status RunScenario(const core::Scenario& sc, const RunOptions& given) {
  RunOptions options = given;
  if (options.warm_start_dir.empty()) options.warm_start_dir = sc.output.dir + "/warm_start";
  const std::string run_dir = sc.output.dir + "/" + sc.name;
  auto use = ClaimResultFolder(run_dir, sc.resolved_yaml, options.existing, "run folder", {}, "virtual");
  if (!use.ok()) return use.status();
  const auto before = *use == FolderUse::kSame
                          ? FinishedSummary(run_dir, Entries(sc).size(), static_cast<size_t>(sc.seeds))
                          : std::nullopt;
  if (!options.tables) {
    if (!before) {
      auto summary = sc.seeds == 1 ? RunOneSeed(sc, options) : RunSeeds(sc, options);
      if (!summary.ok()) return summary.status();
      // No table, but a point whose losses come from another point's training says so.
      const auto& results = summary->at("results");
      if (std::any_of(results.begin(), results.end(), [](const nlohmann::json& r) {
            return r.contains("retimed_from") || r.contains("not_retimed");
          })) {
        std::printf("%s: ", run_dir.c_str());
        PrintRetimed(*summary);
      }
    }
    return core::Status::Ok();
  }
  if (before) {
    std::printf("%s: finished before with this scenario (digest %s); its results, not run again (--force runs "
                "it again):\n",
                run_dir.c_str(), core::ResultDigest(sc.resolved_yaml).c_str());
    if (sc.seeds == 1) {
      PrintComparison(*before);
    } else {
      PrintSeeds(*before);
    }
  } else if (sc.seeds == 1) {
    auto summary = RunOneSeed(sc, options);
    if (!summary.ok()) return summary.status();
    PrintComparison(*summary);
  } else {
    auto summary = RunSeeds(sc, options);
    if (!summary.ok()) return summary.status();
    PrintSeeds(*summary);
  }
  std::printf("results: %s/summary.json\n", run_dir.c_str());
  if (!options.report) {
    std::printf("charts: narrows report %s (or run with --report)\n", run_dir.c_str());
    return core::Status::Ok();
  }
  auto path = WriteReport({run_dir}, "");
  if (!path.ok()) return path.status();
  std::printf("report: %s\n", path->c_str());
  return core::Status::Ok();
}

}  // namespace narrows::tools
