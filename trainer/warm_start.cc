#include "trainer/warm_start.h"

#include <filesystem>
#include <sstream>

#include "core/progress.h"
#include "core/result_record.h"
#include "core/run_writer.h"
#include "trainer/checkpoint.h"
#include "trainer/replica.h"

namespace narrows::trainer {
namespace {

// FNV-1a, 64 bits: a stable name for the cached weights (std::hash is not stable across builds).
uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// Everything that determines the pre-trained weights.
std::string WarmStartKey(const core::Scenario& sc) {
  std::ostringstream k;
  const auto& m = sc.model;
  const auto& d = sc.data;
  const auto& t = sc.train;
  k << "v1 model " << m.preset << ' ' << m.d_model << ' ' << m.n_layers << ' ' << m.n_heads << ' ' << m.seq_len << ' '
    << m.mlp_ratio << ' ' << static_cast<int>(m.positions) << ' ' << static_cast<int>(m.parameterization) << ' '
    << m.base_depth << (m.torchscript.empty() ? "" : " torchscript " + m.torchscript + " " + core::FileDigest(m.torchscript))
    << " data " << d.path << ' ' << d.val_path << ' ' << static_cast<int>(d.format) << ' '
    << d.vocab_size << ' ' << d.val_fraction << " seed " << sc.seed << " train " << t.batch_size << ' '
    << t.grad_accum << ' ' << t.lr << ' ' << static_cast<int>(t.schedule) << ' ' << t.warmup_steps << ' '
    << t.min_lr_ratio << ' ' << t.weight_decay << ' ' << t.beta1 << ' ' << t.beta2 << ' ' << t.eps << ' '
    << t.grad_clip << " steps " << sc.warm_start.steps << " device " << sc.device;
  if (t.optimizer != "adamw") k << " optimizer " << t.optimizer;  // (adamw: the keys of cached files stay)
  // Keys added since: written only where they differ from their defaults, so older keys stay.
  if (m.init_std != 0.02) k << " init_std " << m.init_std;
  if (m.parameterization == core::Parameterization::kCompleteP) k << " base_width " << m.base_width << " alpha " << m.depth_alpha;
  // Continued, the pre-training is the start of one schedule over its steps and the entries'.
  if (sc.warm_start.optimizer == core::WarmStartOptimizer::kContinued) {
    k << " continued " << t.steps;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Fnv1a(k.str())));
  return hex;
}

}  // namespace

core::Result<std::string> PrepareWarmStart(const core::Scenario& sc, const Dataset& data, const std::string& cache_dir,
                                           std::FILE* progress) {
  if (!sc.warm_start.checkpoint.empty()) return sc.warm_start.checkpoint;
  const std::string path = cache_dir + "/pretrained-" + WarmStartKey(sc) + ".ckpt";
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    if (progress) std::fprintf(progress, "warm start: %s (cached)\n", path.c_str());
    return path;
  }
  auto device = ResolveDevice(sc.device);
  if (!device.ok()) return device.status();
  core::ModelSpec model = sc.model;
  model.vocab_size = data.vocab_size;
  // The schedule: the pre-training's own, or, continued by the entries, one over both.
  core::TrainSpec train = sc.train;
  const int64_t steps = sc.warm_start.steps;
  train.steps = sc.warm_start.optimizer == core::WarmStartOptimizer::kContinued ? steps + sc.train.steps : steps;
  ConfigureThreads(sc.threads);
  torch::manual_seed(sc.seed);
  Replica replica(model, train, *device);
  BatchSampler sampler(data.corpus, data.split.train, model.seq_len, sc.seed ^ 0x5741524d53544152ULL, 0, 1,
                       sc.data.sampling);
  core::Progress bar("warm start step", steps, progress);
  double loss = 0.0;
  for (int64_t step = 0; step < steps; ++step) {
    loss = replica.TrainStep(sampler.Next(train.batch_size), LearningRate(train, step)).loss;
    if (!std::isfinite(loss)) {
      return core::Status::Aborted("warm start diverged at step " + std::to_string(step + 1) + "; lower train.lr");
    }
    char detail[48];
    std::snprintf(detail, sizeof detail, "loss %.3f", loss);
    bar.Update(step + 1, detail);
  }
  const double val = replica.Evaluate(data.val_batches);
  char detail[64];
  std::snprintf(detail, sizeof detail, "val loss %.4f", val);
  bar.Finish(detail);
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(cache_dir));
  NARROWS_RETURN_IF_ERROR(WriteModelFile(path, replica, steps, val));
  return path;
}

}  // namespace narrows::trainer
