// What an entry's algorithm sees of the run: what it reads (EntryContext: the scenario, its own
// spec, the run's options, the data, the model, the scripted faults) and where it writes
// (Recorder: events, outer syncs, evaluations). Both are shared by the workers of a process and
// safe to use from their threads. Internal to trainer/ (LibTorch).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainer/dataset.h"
#include "trainer/experiment.h"
#include "trainer/compute_trace.h"
#include "trainer/fault_plan.h"

namespace narrows::trainer {

using Json = nlohmann::json;

struct EntryContext {
  EntryContext(const core::Scenario& s, const core::AlgorithmSpec& a, std::shared_ptr<const Dataset> d);

  core::Scenario sc;
  core::AlgorithmSpec algo;
  ExperimentOptions opt;
  std::shared_ptr<const Dataset> data;
  core::ModelSpec model;  // the entry's: the data's vocabulary, the entry's depth
  torch::Device device{torch::kCPU};
  torch::Tensor initial_params;  // a warm start's parameters (undefined: the seed's initialisation)
  // A warm start's inner optimiser state (by name) and step count, when the entries continue it
  // (warm_start.optimizer: continued); empty otherwise.
  std::vector<std::pair<std::string, torch::Tensor>> initial_optimizer;
  int64_t initial_inner_steps = 0;
  // The learning-rate schedule the entries follow: train's, or, continuing a warm start, one over
  // its steps and theirs, which the entries' step 0 joins at schedule_offset.
  core::TrainSpec schedule;
  int64_t schedule_offset = 0;
  FaultPlan plan;
  int num_workers;
  // compute.trace: the compute per worker and step to charge instead of FLOPs (null: none).
  std::shared_ptr<const ComputeTrace> compute_trace;

  // The object under `key`, made by `make()` (-> Result<T>) by the first worker that asks and
  // shared by the workers of this process after (DiPaCo's routing of the documents).
  template <typename T, typename Make>
  core::Result<std::shared_ptr<const T>> Share(const std::string& key, Make&& make) const {
    std::lock_guard<std::mutex> lock(shared_mu_);
    if (auto it = shared_.find(key); it != shared_.end()) return std::static_pointer_cast<const T>(it->second);
    core::Result<T> made = make();
    if (!made.ok()) return made.status();
    auto out = std::make_shared<const T>(std::move(*made));
    shared_[key] = out;
    return std::shared_ptr<const T>(out);
  }

 private:
  mutable std::mutex shared_mu_;
  mutable std::map<std::string, std::shared_ptr<const void>> shared_;
};

class Recorder {
 public:
  // An event line of events.jsonl (joins, leaves, checkpoints, an algorithm's own).
  virtual void Event(Json e) = 0;
  // One synchronisation of the global model: counted, and its "outer_sync" event written with the
  // step, the time and `detail` (what the algorithm adds: participants, contributors, ...).
  virtual void OuterSync(int64_t step, double time, Json detail) = 0;
  // Whether an evaluation falls in (from_step, to_step] (eval.every, and always the last step).
  virtual bool EvalDue(int64_t from_step, int64_t to_step) const = 0;
  // Records the validation loss of `params` (flat) at `to_step` if one is due; `time`: the
  // evaluating worker's clock. The evaluation itself charges no time.
  virtual void MaybeEvaluate(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params) = 0;
  // Validation loss of `params` on `batches` (default: the validation batches), recording nothing.
  virtual double Evaluate(const torch::Tensor& params, const std::vector<TokenBatch>* batches = nullptr) = 0;
  // Part `part` of the evaluation at `step`: `loss` on a share `weight` of the validation data
  // (DiPaCo: each path on its own documents); the parts are averaged by weight.
  virtual void AddPartialEval(int64_t step, double time, int64_t part, double loss, double weight) = 0;
  // The entry's updates take varying numbers of base batches (its metrics then carry global_batch).
  virtual void MarkVaryingBatch() = 0;
  // The records as JSON, and merging such JSON in (a checkpoint's, or another process's part).
  virtual Json Export() = 0;
  virtual core::Status Merge(const Json& part) = 0;

 protected:
  ~Recorder() = default;
};

}  // namespace narrows::trainer
