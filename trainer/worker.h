// The shared worker context of every algorithm, and the records of one Experiment.
//
// Experiment::Impl holds what all workers of an entry record (steps, events, evaluations) behind
// one mutex; a WorkerContext is one worker's replica, data order, clock accounting and membership.
// Algorithms (trainer/algorithms/) see a WorkerContext, the entry through it (trainer/entry.h:
// EntryContext to read, Recorder to write) and core::Transport: they never ask whether they run
// under the emulator or over a real network (the Roster answers who takes part).
// Internal to trainer/: includes LibTorch. A WorkerContext belongs to one thread.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "core/tags.h"
#include "trainer/entry.h"
#include "trainer/experiment.h"
#include "trainer/roster.h"
#include "trainer/replica.h"
#include "core/spool.h"

namespace narrows::trainer {

using core::Spool;
using core::StepRecord;

// An entry's settings and records: what its workers in this process share, behind one mutex.
struct Experiment::Impl final : EntryContext, Recorder {
  std::mutex mu;
  core::Status error;
  std::vector<StepRecord> records;
  std::vector<Json> events;
  // With ExperimentOptions::spool_dir: records, events and host rates go here as they come (the
  // vectors then hold only what Merge brought), read by Export, moved into the vectors by Finish.
  std::unique_ptr<Spool> spool;
  std::map<int64_t, std::pair<double, double>> evals;  // step -> (time, val loss)
  std::map<int64_t, double> eval_se;                    // step -> the evaluation's standard error
  std::map<int64_t, std::vector<double>> eval_domains;  // step -> its loss per domain (several domains only)
  std::string collective;  // the all-reduce the entry ran (core::CollectiveName; "" if none)
  // Evaluations made of parts: step -> the latest time, and per part its (loss, weight); folded
  // into `evals` by Experiment::Finish, in part order.
  struct PartialEval {
    double time = 0.0;
    std::map<int64_t, std::pair<double, double>> parts;
  };
  std::map<int64_t, PartialEval> partial_evals;
  std::vector<core::TransportStats> final_stats;
  std::vector<double> final_clock, compute_total;
  std::vector<int64_t> peak_round_bytes;  // per worker: the most it sent in one round
  std::vector<bool> ran;  // ranks whose final state is known here (run here or merged)
  double host_compute_s = 0.0;
  std::vector<double> host_rates;  // host seconds per FLOP of every whole step, all workers
  double step_flops = 0.0;         // a worker's inner step (from its replica; carried in parts)
  int64_t outer_syncs = 0, tokens = 0;
  bool varying_batch = false;
  std::unique_ptr<Replica> evaluator;
  Experiment::ProgressFn progress;
  // The progress line follows the slowest worker: each rank's steps done and its clock then, and the
  // steps already shown. Step p is shown once every worker expected at it got there (under the
  // emulator, those the fault plan has alive at p; in a deployment, those this process runs), at
  // the latest of their clocks; a finished worker is expected no more.
  std::map<int, std::pair<int64_t, double>> running_steps;
  std::pair<int64_t, double> SlowestStep() const;
  int64_t progress_step = 0;

  Impl(const core::Scenario& s, const core::AlgorithmSpec& a, std::shared_ptr<const Dataset> d);

  void Fail(const core::Status& s, int rank);
  // Moves what the spool holds into records, events and host_rates and closes it (a failure
  // becomes a spool_error event: what could not be spooled was kept in memory). REQUIRES: mu held.
  void Unspool();
  // REQUIRES: mu held.
  void AddRecord(const StepRecord& r) { spool ? spool->Add(r) : records.push_back(r); }
  void AddEvent(Json e) { spool ? spool->Add(e) : events.push_back(std::move(e)); }
  void AddHostRate(double r) { spool ? spool->AddRate(r) : host_rates.push_back(r); }

  void Event(Json e) override;
  void OuterSync(int64_t step, double time, Json detail) override;
  bool EvalDue(int64_t from_step, int64_t to_step) const override;
  void MaybeEvaluate(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params) override;
  double Evaluate(const torch::Tensor& params, const std::vector<TokenBatch>* batches = nullptr) override;
  // With `buffers` (a torchscript module's, flat), the evaluator runs with those beside `params`.
  Replica::Evaluation EvaluateWithError(const torch::Tensor& params, const std::vector<TokenBatch>* batches,
                                        const torch::Tensor* buffers = nullptr);
  void MaybeEvaluateWith(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params,
                         const torch::Tensor* buffers);
  void AddPartialEval(int64_t step, double time, int64_t part, double loss, double weight) override;
  void MarkVaryingBatch() override;
  Json Export() override;
  core::Status Merge(const Json& part) override;
};

void ToHost(const torch::Tensor& t, float* out);
void FromHost(const float* in, torch::Tensor& t);
// A 64-bit digest of a float tensor's values (FNV-1a over their bits, in order), 16 hex digits: an
// outer step's global parameters in its outer_sync event, which `narrows replay` compares step by
// step with the replay's (equal values, equal digests; one bit apart, almost surely not).
std::string Digest(const torch::Tensor& t);

// How a reduced buffer travels: with a lossy `codec`, all but the last `exact_tail` floats
// encoded (core::AllReduceSumEncoded), with `residuals` (the algorithm keeps one per buffer it
// reduces; null: this contribution takes no part in error feedback) where the codec asks for
// error feedback.
struct Encoding {
  const core::Codec* codec = nullptr;
  int64_t exact_tail = 0;
  core::EncodingResiduals* residuals = nullptr;
};

// What a measured computation is charged under compute.statistic: median: its FLOPs at the median
// host rate (seconds per FLOP) of the worker's last `window` whole steps, so a step that a host
// hiccup slowed costs what its neighbours did. Rates are taken over whole steps (`step_flops` FLOPs
// charged, in one piece or several: DDP charges a step bucket by bucket, and its pieces' FLOP shares
// are modelled, not measured), and the pieces of a step split its time by their FLOPs.
class MedianRate {
 public:
  MedianRate(double step_flops, size_t window = 31) : step_flops_(step_flops), window_(window) {}
  struct Charged {
    double seconds;     // what to charge: FLOPs at the median rate; the host time before any step ended
    double step_rate;   // the rate of the step this piece ended (seconds per FLOP), NaN if none
  };
  Charged Charge(double host_s, double flops) {
    host_ += host_s;
    flops_ += flops;
    double ended = std::numeric_limits<double>::quiet_NaN();
    if (flops_ >= step_flops_ * (1 - 1e-9)) {
      ended = host_ / flops_;
      recent_.push_back(ended);
      if (recent_.size() > window_) recent_.pop_front();
      host_ = flops_ = 0.0;
    }
    if (recent_.empty()) return {host_s, ended};
    std::vector<double> sorted(recent_.begin(), recent_.end());
    const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), mid, sorted.end());
    return {*mid * flops, ended};
  }

 private:
  double step_flops_;
  size_t window_;
  double host_ = 0.0, flops_ = 0.0;  // the step under way
  std::deque<double> recent_;
};

// The entry's records as one worker's algorithm sees them: its evaluations run with this worker's
// model buffers beside the parameters they are given (a torchscript module's float32 buffers; the
// built-in model has none). While held (model.buffers: averaged, until the round's average), an
// evaluation that falls due waits, with a copy of its parameters, for Release.
class WorkerRecorder final : public Recorder {
 public:
  WorkerRecorder(Experiment::Impl& x, Replica& replica) : x_(x), replica_(replica) {}
  void Event(Json e) override { x_.Event(std::move(e)); }
  void OuterSync(int64_t step, double time, Json detail) override { x_.OuterSync(step, time, std::move(detail)); }
  bool EvalDue(int64_t from_step, int64_t to_step) const override { return x_.EvalDue(from_step, to_step); }
  void MaybeEvaluate(int64_t from_step, int64_t to_step, double time, const torch::Tensor& params) override;
  double Evaluate(const torch::Tensor& params, const std::vector<TokenBatch>* batches = nullptr) override {
    return x_.EvaluateWithError(params, batches, &replica_.model().flat_buffers()).loss;
  }
  void AddPartialEval(int64_t step, double time, int64_t part, double loss, double weight) override {
    x_.AddPartialEval(step, time, part, loss, weight);
  }
  void MarkVaryingBatch() override { x_.MarkVaryingBatch(); }
  Json Export() override { return x_.Export(); }
  core::Status Merge(const Json& part) override { return x_.Merge(part); }
  void Hold() { hold_ = true; }
  // Runs the evaluations held, with the buffers as they are now, and holds no more.
  void Release();

 private:
  struct Held {
    int64_t from_step, to_step;
    double time;
    torch::Tensor params;
  };
  Experiment::Impl& x_;
  Replica& replica_;
  bool hold_ = false;
  std::vector<Held> held_;
};

// One worker: its replica and data, its clock accounting, and who it trains with.
struct WorkerContext {
  const EntryContext& entry;
  WorkerRecorder own_records;  // what `records` refers to
  Recorder& records;
  int rank;
  core::Transport& t;
  Replica replica;
  BatchSampler sampler;
  double speed;
  double compute_s = 0.0, comm_s = 0.0, idle_s = 0.0;
  int64_t computing_step = 0;  // the step this worker's computations belong to: the one after its last record
  int64_t peak_round_bytes = 0;  // the most bytes one round's synchronisation sent
  void CountSyncBytes(int64_t bytes) { peak_round_bytes = std::max(peak_round_bytes, bytes); }
  // Bytes the inner steps' own collectives sent (hierarchical DiLoCo's island rings): not a round's
  // synchronisation, so SyncBytesSent leaves them out.
  int64_t inner_bytes = 0;
  int64_t SyncBytesSent() const { return Stats().bytes_sent - inner_bytes; }
  std::vector<float> buffer;  // the algorithm's all-reduce buffer
  // A resumed worker continues its predecessor's clock and byte counts.
  double time_offset = 0.0;
  int64_t sent_before = 0, received_before = 0;
  // The transport's counts when this worker started (a transport may serve several entries).
  const core::TransportStats start_stats;
  const double step_flops;  // training FLOPs of one inner step of train.batch_size sequences
  MedianRate recent_rate;   // this worker's measured step rates
  std::unique_ptr<Roster> roster;

  WorkerContext(Experiment::Impl& impl, int r, core::Transport& transport);

  double Now() { return t.clock().Now() + time_offset; }
  core::TransportStats Stats() const;
  bool live() const { return roster->live(); }

  // Runs fn (real computation) and charges its time to this worker's clock: measured host time, or
  // FLOPs / device throughput when modelled; divided by the worker's speed factor.
  template <typename Fn>
  auto Compute(double modelled_flops, Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    auto out = fn();
    replica.FinishOnDevice();  // a GPU's queued kernels are this replica's, not the next one's
    ChargeCompute(modelled_flops, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return out;
  }
  // Charges `host_s` measured (or `modelled_flops` modelled) seconds of compute to the clock.
  void ChargeCompute(double modelled_flops, double host_s);
  // Training FLOPs of one inner step of this worker's batch.
  double StepFlops() const { return step_flops; }
  // One local AdamW step on this worker's next batch, its compute charged to the clock. The
  // learning rate follows the schedule, warmed up again from `rewarm_from` (>= 0: the step this
  // worker joined at: a fresh Adam's first steps are full-size sign steps).
  StepStats InnerStep(int64_t step, int64_t rewarm_from);
  // This worker's data stream as a new process has it at `step`: from the stream's start, one batch
  // drawn per step before it (a resumed or restarted worker, and one that comes back in a replay).
  void StartDataAt(int64_t step) {
    sampler.Restart();
    for (int64_t s = 0; s < step; ++s) sampler.Next(entry.sc.train.batch_size);
  }
  // The learning rate InnerStep uses at `step`.
  double InnerLearningRate(int64_t step, int64_t rewarm_from) const;
  // With warm_start.optimizer: continued, puts the warm start's inner optimiser state and step
  // count in this worker's replica; InvalidArgument if it is another optimiser's.
  core::Status ContinueWarmStart();
  // A collective, with its virtual duration counted as communication (or idle, for joiners).
  // What the time a worker spends outside compute is counted as.
  enum class Spent { kCommunicating, kIdle };
  core::Status Timed(Spent as, const std::function<core::Status()>& fn);
  void Record(int64_t step, double loss);
  void Done();

  // All-reduce (sum) of the first `count` floats of `buffer` over `group`, `fill` writing this
  // worker's contribution first; the roster decides what a dead member means.
  // Collectives that may be in flight at once between the same workers need distinct `tag`s.
  core::Status Reduce(std::vector<int>* group, int64_t count, int64_t step, const std::function<void()>& fill,
                      core::OnFailure on_failure, Encoding encoding = {}, int tag = kTagReduce);
  // The same over `count` floats at `data` instead of `buffer` (a collective beside the algorithm's).
  core::Status Reduce(std::vector<int>* group, float* data, int64_t count, int64_t step,
                      const std::function<void()>& fill, core::OnFailure on_failure, int tag);
  // The same all-reduce over `data`, started beside this worker (its clock runs on while the bytes
  // move); `data` must live until the work is waited for. The guard (live) outlives the work.
  struct PendingReduce {
    std::unique_ptr<core::Transport> guard;
    std::unique_ptr<core::Work> work;
  };
  PendingReduce StartReduce(const std::vector<int>& group, float* data, int64_t count, int64_t step,
                            Encoding encoding = {});
  // Records the collective the entry runs (the first all-reduce's), for its summary.
  void NoteCollective(const core::CollectiveOptions& o, const Encoding& encoding);
  // The same, for a communication that is no all-reduce ("all-gather", "pairs").
  void NoteCollective(const std::string& name);
  // Collective options of this entry (algorithm, islands, pipelining over a real network).
  core::CollectiveOptions Options(std::vector<int> group, int tag) const;

  static constexpr int kTagReduce = core::tags::kReduce;
  static constexpr int kTagJoin = core::tags::kJoin;
  static constexpr int kTagBuffers = core::tags::kBuffers;

 private:
  Experiment::Impl& x;  // the records beyond the Recorder's: steps, clocks, bytes
};

// Sends `tensors` (flat, same device) and `*counter` (none: null) from root to the joiners; everyone in
// {root} + joiners calls it. Joiners count the time as idle.
core::Status SyncToJoiners(WorkerContext& w, int root, const std::vector<int>& joiners,
                           const std::vector<torch::Tensor*>& tensors, int64_t* counter, int tag);

}  // namespace narrows::trainer
