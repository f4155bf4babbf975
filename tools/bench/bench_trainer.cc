// bench_trainer: optimiser steps per second of narrows' trainer on one model preset, for
// tools/bench/trainer, which runs tools/bench/bench_trainer.py on the same shapes beside it.
//
//   bench_trainer PRESET BATCH THREADS STEPS WARMUP
// Prints one JSON line: {"impl": "narrows", "tokens_per_s": ..., "step_ms": ..., ...}.
//   bench_trainer gemm THREADS
// Prints the GFLOP/s of a 2048^3 float GEMM through LibTorch: the machine's practical peak, against
// which model FLOP utilisation is reported.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "core/scenario.h"
#include "trainer/replica.h"

namespace {

int GemmPeak(int threads) {
  narrows::trainer::ConfigureThreads(threads);
  const int64_t n = 2048;
  auto a = torch::randn({n, n}), b = torch::randn({n, n}), c = torch::empty({n, n});
  at::mm_out(c, a, b);
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  std::printf("{\"gemm_gflops\": %.1f, \"threads\": %d}\n", best, threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "gemm") return GemmPeak(std::atoi(argv[2]));
  if (argc != 6) {
    std::fprintf(stderr, "usage: bench_trainer PRESET BATCH THREADS STEPS WARMUP\n");
    return 2;
  }
  const std::string preset = argv[1];
  const int64_t batch = std::atoll(argv[2]), threads = std::atoll(argv[3]);
  const int64_t steps = std::atoll(argv[4]), warmup = std::atoll(argv[5]);
  auto scenario = narrows::core::ParseScenario("model: {preset: " + preset + "}\n", "bench");
  if (!scenario.ok()) {
    std::fprintf(stderr, "%s\n", scenario.status().message().c_str());
    return 2;
  }
  const narrows::core::ModelSpec& spec = scenario->model;
  narrows::trainer::ConfigureThreads(threads);
  torch::manual_seed(0);
  narrows::trainer::Replica replica(spec, scenario->train, torch::Device(torch::kCPU));

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
      "\"flops_per_token\": %.0f}\n",
      preset.c_str(), static_cast<long long>(replica.model().num_params()), tokens / step_s.front(),
      tokens / step_s[step_s.size() / 2], 1e3 * step_s.front(), 1e3 * optimizer_s.front(),
      replica.model().TrainFlopsPerToken());
  return 0;
}
