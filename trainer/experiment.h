// Experiment: one entry of a scenario's `compare:` list (DDP, DiLoCo, local SGD), trained by M
// workers that talk only through core::Transport and read time only through its core::Clock.
//
// The same worker code runs under the emulator (one actor per worker, virtual time) and over a real
// network (one process per worker). RunWorker is called once per rank, concurrently or in turn;
// Finish is called once after all RunWorker calls returned and writes the entry's metrics.jsonl and
// events.jsonl. Membership follows the scenario's faults (trainer/fault_plan.h). Torch-free header.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/scenario.h"
#include "core/transport.h"
#include "trainer/dataset.h"

namespace narrows::trainer {

struct EntryResult {
  std::string name, algorithm;
  int workers = 0;
  int64_t steps = 0, tokens = 0, outer_syncs = 0;
  double final_val_loss = 0.0;
  double virtual_time_s = 0.0;       // the slowest worker's clock at the end
  double time_to_target_s = -1.0;    // first evaluation at or below scenario.target_loss (-1: never)
  double bytes_sent_per_worker = 0.0;
  double compute_utilization = 0.0;  // mean over workers of compute time / virtual_time_s
  double host_compute_s = 0.0;       // host seconds spent in replica compute (measured mode)
};

class Experiment {
 public:
  static core::Result<std::unique_ptr<Experiment>> Create(const core::Scenario& scenario,
                                                          const core::AlgorithmSpec& algorithm,
                                                          std::shared_ptr<const Dataset> data);
  ~Experiment();

  // Called as training advances: the furthest step any worker finished, its virtual time and loss.
  // Called from the workers' threads, one at a time.
  using ProgressFn = std::function<void(int64_t steps_done, double virtual_time_s, double loss)>;
  void SetProgress(ProgressFn fn);

  // The whole training of worker `rank`. Errors are kept for Finish.
  void RunWorker(int rank, core::Transport& transport);
  // Aggregates the workers' records into `dir`/metrics.jsonl and events.jsonl.
  core::Result<EntryResult> Finish(const std::string& dir);

  struct Impl;  // opaque; public so that the worker loops in experiment.cc can name it

 private:
  explicit Experiment(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace narrows::trainer
