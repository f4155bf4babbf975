// TrainSingle (train.h): one replica trained alone, without workers or a network.
#include "trainer/train.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>

#include "core/progress.h"
#include "core/run_writer.h"
#include "trainer/checkpoint.h"
#include "trainer/dataset.h"
#include "trainer/replica.h"

namespace narrows::trainer {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Rate(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk tok/s", tokens_per_s / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f tok/s", tokens_per_s);
  }
  return buf;
}

// What a single run's summary knows before its first step.
TrainSummary NewSummary(const std::string& run_dir, Replica& replica, const Dataset& data, int threads) {
  TrainSummary summary;
  summary.run_dir = run_dir;
  summary.parameters = replica.model().num_params();
  summary.flops_per_token = replica.model().TrainFlopsPerToken();
  summary.unigram_entropy = data.unigram_entropy;
  summary.threads = threads;
  summary.best_val_loss = std::numeric_limits<double>::infinity();
  return summary;
}

// Its times and rates after the last step.
void Complete(TrainSummary* summary, double train_time, double wall_time, bool byte_level) {
  summary->train_time_s = train_time;
  summary->wall_time_s = wall_time;
  summary->tokens_per_s = static_cast<double>(summary->tokens) / train_time;
  summary->achieved_flops = summary->flops_per_token * summary->tokens_per_s;
  if (byte_level) summary->final_val_bpb = summary->final_val_loss * (1.0 / std::log(2.0));  // as the metrics lines
}

// summary.json of a single-replica run.
nlohmann::json SummaryJson(const core::Scenario& sc, const TrainSummary& summary) {
  nlohmann::json out = {
      {"scenario", sc.name},
      {"algorithm", "single"},
      {"device", sc.device},
      {"threads", summary.threads},
      {"parameters", summary.parameters},
      {"steps", summary.steps},
      {"tokens", summary.tokens},
      {"final_train_loss", summary.final_train_loss},
      {"final_val_loss", summary.final_val_loss},
      {"best_val_loss", summary.best_val_loss},
      {"unigram_entropy", summary.unigram_entropy},
      {"wall_time_s", summary.wall_time_s},
      {"train_time_s", summary.train_time_s},
      {"tokens_per_s", summary.tokens_per_s},
      {"flops_per_token", summary.flops_per_token},
      {"achieved_flops_per_s", summary.achieved_flops},
  };
  out["final_val_bpb"] = summary.final_val_bpb >= 0 ? nlohmann::json(summary.final_val_bpb) : nlohmann::json();
  return out;
}

// The fields of a metrics.jsonl line of plain training after step summary.steps (the evaluation's,
// if any, are in `line` already).
void AddStepFields(nlohmann::json& line, const TrainSummary& summary, double lr, double grad_norm, double train_time,
                   double wall_time) {
  line["step"] = summary.steps;
  line["tokens"] = summary.tokens;
  line["lr"] = lr;
  line["train_loss"] = summary.final_train_loss;
  line["grad_norm"] = grad_norm;
  line["train_time_s"] = train_time;
  line["wall_time_s"] = wall_time;
  line["tokens_per_s"] = static_cast<double>(summary.tokens) / train_time;
}

// Inputs are valid: from here on the run folder is ours. Its resolved scenario, and metrics.jsonl
// opened.
core::Status OpenRunFolder(const core::Scenario& sc, const std::string& run_dir, core::JsonlWriter* metrics) {
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(run_dir));
  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/scenario.yaml", sc.resolved_yaml));
  NARROWS_RETURN_IF_ERROR(metrics->Open(run_dir + "/metrics.jsonl"));
  return core::Status::Ok();
}

// The evaluation after a step, into its metrics line and the summary; its loss.
double EvaluateAfterStep(Replica& replica, const Dataset& data, TrainSummary* summary, nlohmann::json* line) {
  const double nats_to_bits = 1.0 / std::log(2.0);
  const Replica::Evaluation e = replica.EvaluateWithError(data.val_batches);
  const double val = e.loss;
  if (std::isfinite(e.standard_error)) (*line)["val_loss_se"] = e.standard_error;
  summary->best_val_loss = std::min(summary->best_val_loss, val);
  summary->final_val_loss = val;
  (*line)["val_loss"] = val;
  if (data.byte_level) (*line)["val_bpb"] = val * nats_to_bits;
  return val;
}

}  // namespace

core::Result<TrainSummary> TrainSingle(const core::Scenario& sc, const TrainOptions& options) {
  const auto wall_start = Clock::now();
  auto device = ResolveDevice(sc.device);
  if (!device.ok()) return device.status();

  auto dataset = LoadDataset(sc, options.data_root);
  if (!dataset.ok()) return dataset.status();
  const Dataset& data = **dataset;
  core::ModelSpec model_spec = sc.model;
  model_spec.vocab_size = data.vocab_size;

  const int threads = ConfigureThreads(sc.threads);
  torch::manual_seed(sc.seed);
  Replica replica(model_spec, sc.train, *device);
  BatchSampler sampler(data.corpus, data.split.train, model_spec.seq_len, sc.seed, 0, 1, sc.data.sampling);

  const std::string run_dir = sc.output.dir + "/" + sc.name;
  core::JsonlWriter metrics;
  NARROWS_RETURN_IF_ERROR(OpenRunFolder(sc, run_dir, &metrics));

  TrainSummary summary = NewSummary(run_dir, replica, data, threads);
  const int64_t tokens_per_step = sc.train.batch_size * model_spec.seq_len;

  core::Progress progress("step", sc.train.steps, options.progress);
  double train_time = 0.0, loss_sum = 0.0, last_val = std::nan("");
  int64_t loss_count = 0;
  for (int64_t step = 0; step < sc.train.steps; ++step) {
    const TokenBatch batch = sampler.Next(sc.train.batch_size);
    const double lr = LearningRate(sc.train, step);
    const auto t0 = Clock::now();
    const StepStats stats = replica.TrainStep(batch, lr);
    train_time += Seconds(Clock::now() - t0);
    if (!std::isfinite(stats.loss)) {
      return core::Status::Aborted("training diverged at step " + std::to_string(step + 1) +
                                   " (loss " + std::to_string(stats.loss) + "); lower train.lr");
    }
    loss_sum += stats.loss;
    ++loss_count;
    summary.steps = step + 1;
    summary.tokens = summary.steps * tokens_per_step;
    const bool last = step + 1 == sc.train.steps;
    const bool eval_now = last || (sc.eval.every > 0 && (step + 1) % sc.eval.every == 0);
    nlohmann::json line;
    if (eval_now) last_val = EvaluateAfterStep(replica, data, &summary, &line);
    if (eval_now || last || (step + 1) % sc.output.log_every == 0) {
      summary.final_train_loss = loss_sum / static_cast<double>(loss_count);
      AddStepFields(line, summary, lr, stats.grad_norm, train_time, Seconds(Clock::now() - wall_start));
      NARROWS_RETURN_IF_ERROR(metrics.Append(line.dump()));
      loss_sum = 0.0;
      loss_count = 0;
    }
    char detail[96];
    std::snprintf(detail, sizeof detail, "%s | loss %.3f | val %.3f",
                  Rate(static_cast<double>(summary.tokens) / train_time).c_str(), stats.loss, last_val);
    progress.Update(step + 1, detail);
  }
  metrics.Close();

  Complete(&summary, train_time, Seconds(Clock::now() - wall_start), data.byte_level);
  char detail[128];
  std::snprintf(detail, sizeof detail, "%s | val loss %.4f", Rate(summary.tokens_per_s).c_str(),
                summary.final_val_loss);
  progress.Finish(detail);

  NARROWS_RETURN_IF_ERROR(core::WriteFileAtomic(run_dir + "/summary.json", SummaryJson(sc, summary).dump(2) + "\n"));
  // The trained weights, for a comparison to start from (scenario warm_start.checkpoint).
  NARROWS_RETURN_IF_ERROR(WriteModelFile(run_dir + "/model.ckpt", replica, summary.steps, summary.final_val_loss));
  return summary;
}

}  // namespace narrows::trainer
