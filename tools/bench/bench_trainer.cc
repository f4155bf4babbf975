// bench_trainer: optimiser steps per second of narrows' trainer on one model preset, for
// tools/bench/trainer, which runs tools/bench/bench_trainer.py on the same shapes beside it.
//
//   bench_trainer PRESET BATCH THREADS STEPS WARMUP [DEVICE [PRECISION]]
// PRESET: a preset's name, or a TorchScript module's file (tools/export-model's gpt.pt, ...).
// Prints one JSON line: {"impl": "narrows", "tokens_per_s": ..., "step_ms": ..., ...}. DEVICE: cpu
// (default), cuda or cuda:N; PRECISION: fp32 (default) or bf16 (train.precision).
//   bench_trainer gemm THREADS [DEVICE]
// Prints the GFLOP/s of a GEMM through LibTorch: the machine's practical peak, against which model
// FLOP utilisation is reported (2048^3 float32 on the CPU; 8192^3 bfloat16 on a GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "core/scenario.h"
#include "sim/network_registry.h"
#include "trainer/replica.h"
#include "trainer/script_model.h"

namespace {

void Finish(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

int GemmPeak(int threads, torch::Device device) {
  narrows::trainer::ConfigureThreads(threads);
  const bool gpu = !device.is_cpu();
  const int64_t n = gpu ? 8192 : 2048;
  const auto opts = torch::TensorOptions().device(device).dtype(gpu ? torch::kBFloat16 : torch::kFloat32);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts), c = torch::empty({n, n}, opts);
  for (int rep = 0; rep < 3; ++rep) at::mm_out(c, a, b);
  Finish(device);
  double best = 0.0;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    Finish(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  std::printf("{\"gemm_gflops\": %.1f, \"threads\": %d, \"n\": %lld, \"dtype\": \"%s\"}\n", best, threads,
              static_cast<long long>(n), gpu ? "bf16" : "fp32");
  return 0;
}

torch::Device DeviceOr(int argc, char** argv, int at) {
  if (argc <= at) return torch::Device(torch::kCPU);
  auto device = narrows::trainer::ResolveDevice(argv[at]);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", device.status().message().c_str());
    std::exit(2);
  }
  return *device;
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 3 || argc == 4) && std::string(argv[1]) == "gemm") return GemmPeak(std::atoi(argv[2]), DeviceOr(argc, argv, 3));
  if (argc < 6 || argc > 8) {
    std::fprintf(stderr, "usage: bench_trainer PRESET BATCH THREADS STEPS WARMUP [DEVICE [PRECISION]]\n");
    return 2;
  }
  const torch::Device device = DeviceOr(argc, argv, 6);
  const std::string precision = argc > 7 ? argv[7] : "fp32";
  const std::string preset = argv[1];
  const int64_t batch = std::atoll(argv[2]), threads = std::atoll(argv[3]);
  const int64_t steps = std::atoll(argv[4]), warmup = std::atoll(argv[5]);
  // A scenario names a network model (the analytic one by default): keep the models linked in.
  (void)narrows::sim::RegisteredNetworkModels();
  // GPT-2 small with its own vocabulary (the other presets read bytes), as bench_trainer.py's PRESETS.
  const std::string vocab = preset == "gpt2-124m" ? "50257" : "256";
  // A TorchScript module (tools/export-model's): bytes, sequences of 128.
  const bool script = preset.size() > 3 && preset.substr(preset.size() - 3) == ".pt";
  const std::string model = script ? "{torchscript: '" + preset + "', seq_len: 128}" : "{preset: " + preset + "}";
  auto scenario = narrows::core::ParseScenario("model: " + model + "\ndata: {vocab_size: " + vocab +
                                                   "}\ntrain: {precision: " + precision + "}\n",
                                               "bench");
  if (scenario.ok() && script) {
    const narrows::core::Status checked = narrows::trainer::CheckScriptModel(scenario->model);
    if (!checked.ok()) scenario = checked;
  }
  if (!scenario.ok()) {
    std::fprintf(stderr, "%s\n", scenario.status().message().c_str());
    return 2;
  }
  const narrows::core::ModelSpec& spec = scenario->model;
  narrows::trainer::ConfigureThreads(threads);
  torch::manual_seed(0);
  narrows::trainer::Replica replica(spec, scenario->train, device);

  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> token(0, spec.vocab_size - 1);
  narrows::trainer::TokenBatch b;
  b.batch = batch;
  b.seq_len = spec.seq_len;
  for (int64_t i = 0; i < batch * spec.seq_len; ++i) {
    b.inputs.push_back(token(rng));
    b.targets.push_back(token(rng));
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> step_s, optimizer_s;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    replica.ComputeGradients(b);
    const auto t1 = Clock::now();
    replica.ApplyGradients(1e-3);
    Finish(device);
    const auto t2 = Clock::now();
    if (s < warmup) continue;
    step_s.push_back(std::chrono::duration<double>(t2 - t0).count());
    optimizer_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  std::sort(step_s.begin(), step_s.end());
  std::sort(optimizer_s.begin(), optimizer_s.end());
  const double tokens = static_cast<double>(batch * spec.seq_len);
  // The fastest step is the one least disturbed by other tenants of a shared machine.
  std::printf(
      "{\"impl\": \"narrows\", \"preset\": \"%s\", \"params\": %lld, \"tokens_per_s\": %.1f, "
      "\"median_tokens_per_s\": %.1f, \"step_ms\": %.2f, \"optimizer_ms\": %.3f, "
      "\"flops_per_token\": %.0f, \"device\": \"%s\", \"precision\": \"%s\"}\n",
      preset.c_str(), static_cast<long long>(replica.model().num_params()), tokens / step_s.front(),
      tokens / step_s[step_s.size() / 2], 1e3 * step_s.front(), 1e3 * optimizer_s.front(),
      replica.model().TrainFlopsPerToken(), device.str().c_str(), precision.c_str());
  return 0;
}
