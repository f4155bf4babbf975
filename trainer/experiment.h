// Experiment: one entry of a scenario's `compare:` list (DDP, DiLoCo, local SGD), trained by M
// workers that talk only through core::Transport and read time only through its core::Clock.
//
// The same worker code runs under the emulator (one actor per worker, virtual time) and over a real
// network (one process per worker). RunWorker is called once per rank, concurrently or in turn;
// Finish is called once after all RunWorker calls returned and writes the entry's metrics.jsonl and
// events.jsonl. Across processes, each process exports what its workers recorded (ExportPart) and
// one process merges the parts (MergePart) before Finish. Torch-free header.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "core/transport.h"
#include "trainer/dataset.h"

namespace narrows::trainer {

struct EntryResult {
  std::string name, algorithm;
  std::string collective;  // what it ran ("ring", "two-phase", ..., "all-gather", "pairs"; "none" without any)
  int workers = 0;
  int64_t steps = 0, tokens = 0, outer_syncs = 0;
  double final_val_loss = 0.0;
  // The final evaluation's own standard error (over its sequences; NaN where it was scored in
  // parts, as DiPaCo's paths are).
  double final_val_loss_se = 0.0;
  // The final evaluation per domain of a multi-domain corpus, as Dataset::domains (empty for one
  // domain, and where the evaluation was made in parts).
  std::vector<std::pair<std::string, double>> final_val_loss_by_domain;
  double virtual_time_s = 0.0;       // the slowest worker's clock at the end
  double bytes_sent_per_worker = 0.0;
  // Peak bandwidth: the most bytes any worker sent within one round of the algorithm (one step of
  // DDP, H of DiLoCo, H / fragments of Streaming DiLoCo), the joiners' state transfers excluded.
  double peak_bytes_per_round = 0.0;
  double compute_utilization = 0.0;  // mean over workers of compute time / virtual_time_s
  double host_compute_s = 0.0;       // host seconds spent in replica compute (measured mode)
  // This host's time for one worker's step of train.batch_size sequences (from its seconds per FLOP
  // over every computation, in either compute mode): median and the 10th and 90th percentiles.
  double host_step_s = 0.0, host_step_s_p10 = 0.0, host_step_s_p90 = 0.0;
  double step_flops = 0.0;  // training FLOPs of that step
};

// A model's size and cost, for planning without LibTorch in the caller: parameters, and training
// FLOPs per token (forward and backward, as Gpt::TrainFlopsPerToken).
struct ModelCost {
  int64_t params = 0;
  double train_flops_per_token = 0.0;
  std::string flops_source;  // Gpt::FlopsSource
};
ModelCost CostOf(const core::ModelSpec& spec);

enum class Membership {
  // From the scenario's faults, known in advance to every worker (the emulator).
  kScripted,
  // From the transport's heartbeats (a deployment): collectives run through a core::GroupGuard;
  // when a worker dies the survivors drop it and repeat the collective (DDP stops instead if
  // deploy.on_failure is stop); a restarted DiLoCo worker joins at the next outer step with the
  // global state of a live peer. Crash faults are the deployment's to inject
  // (ExperimentOptions::before_step); leave, join and link_down faults are the emulator's only.
  kLive,
  // From a deployment's membership trace (MembershipTrace), replayed in the emulator: a round's
  // members and joiners are the trace's (and DyLU's inner steps), and a worker that left a round
  // comes back as a restarted process does (its inner state lost, its data stream restarted and
  // counted up to the step it joins).
  kReplay,
};

// One push an asynchronous server took, in order: its worker, and (DyLU) the inner-step count the
// server answered with (0: none recorded).
struct AsyncArrival {
  int worker = 0;
  int64_t next_inner_steps = 0;
};

// What a deployment's membership was, round by round, as its events record it: the members whose
// contribution is in the synchronisation that ends each round (by the step it ends at), and the
// workers welcomed back at the start of a round (by the step it starts at).
struct MembershipTrace {
  std::map<int64_t, std::vector<int>> members;  // round end -> members, ascending
  std::map<int64_t, std::vector<int>> joiners;  // round start -> joiners, ascending
  // DyLU: round end -> each worker's inner steps for the next round, as the leader computed them.
  std::map<int64_t, std::vector<int64_t>> inner_steps;
  // The steps whose collective failed and was repeated without the dead (DDP reduces those whole,
  // not in its buckets).
  std::set<int64_t> repeated;
  // async-diloco: every push its server took, in the order taken (`arrival` events).
  std::vector<AsyncArrival> arrivals;
};

struct ExperimentOptions {
  Membership membership = Membership::kScripted;
  bool rejoin = false;         // live: this process restarts a rank of a run in progress
  std::string checkpoint_dir;  // live DiLoCo with deploy.checkpoint_every: where checkpoints go
  std::string resume_from;     // live DiLoCo: a checkpoint folder (…/step-N) to continue from
  // Where this process appends its records (steps, events, host rates) as they come, so that a long
  // run's memory stays flat (core/spool.h); read back at ExportPart and Finish. Empty: in memory.
  std::string spool_dir;
  // Live: called by each worker before it trains `step`. The deployment's fault layer (outside
  // the trainer) ends the process there for a scenario's crash fault; the trainer crashes nothing.
  std::function<void(int rank, int64_t step)> before_step;
  // kReplay: the trace to follow.
  std::shared_ptr<const MembershipTrace> trace;
  // Timed, not trained: the replicas skip the math that does not move time (Replica::set_timing_only)
  // and evaluations are not computed. Its losses are meaningless until AdoptTraining gives it those of
  // a run that trained the same entry under another network.
  bool timing_only = false;
};

class Experiment {
 public:
  static core::Result<std::unique_ptr<Experiment>> Create(const core::Scenario& scenario,
                                                          const core::AlgorithmSpec& algorithm,
                                                          std::shared_ptr<const Dataset> data,
                                                          const ExperimentOptions& options = {});
  ~Experiment();

  // Every worker (and the evaluator) starts from the parameters in the model file `path`
  // (trainer/warm_start.h) instead of the seed's initialisation. Before RunWorker.
  core::Status SetWarmStart(const std::string& path);
  // Live: this process starts the run with the others after all (ExperimentOptions::rejoin off): it
  // was started again before its predecessor joined the run. Before RunWorker.
  void StartWithTheOthers();

  // Called as training advances: the furthest step any worker finished, its virtual time and loss.
  // Called from the workers' threads, one at a time.
  using ProgressFn = std::function<void(int64_t steps_done, double virtual_time_s, double loss)>;
  void SetProgress(ProgressFn fn);

  // The whole training of worker `rank`. Errors are kept for Finish.
  void RunWorker(int rank, core::Transport& transport);
  // The first error of a worker run (or merged) here; OK if none.
  core::Status status() const;
  // What the workers run by this process recorded (JSON), and merging another process's.
  std::string ExportPart() const;
  core::Status MergePart(const std::string& part);
  // With a spool folder: merges what processes of this run killed on this machine left there (their
  // step records and events up to their death), each noted as a `gathered_spool` event; how many
  // were. For the process that writes the results, after MergePart.
  int GatherLeftoverSpools();
  // A timed run (ExperimentOptions::timing_only) takes its losses, its evaluations and its host's
  // measured compute from `trained`, the ExportPart of a run that trained the same entry with the same
  // scenario under another network. Refused (InvalidArgument naming the first difference, nothing
  // changed) unless both did the same things: the same steps of the same workers with the same
  // compute and bytes, the same evaluations, outer synchronisations and events, apart from their
  // times. What an algorithm computes must not depend on when its messages arrive; this checks what
  // can be checked of that.
  core::Status AdoptTraining(const std::string& trained);
  // Aggregates the workers' records into `dir`/metrics.jsonl and events.jsonl.
  core::Result<EntryResult> Finish(const std::string& dir);

  struct Impl;  // opaque; public so that the worker loops in experiment.cc can name it

 private:
  explicit Experiment(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace narrows::trainer
