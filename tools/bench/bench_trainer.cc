// bench_trainer: optimiser steps per second of narrows' trainer on one model preset, for
// tools/bench/trainer, which runs tools/bench/bench_trainer.py on the same shapes beside it.
//
//   bench_trainer PRESET BATCH THREADS STEPS WARMUP
// Prints one JSON line: {"impl": "narrows", "tokens_per_s": ..., "step_ms": ..., ...}.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "core/scenario.h"
#include "trainer/replica.h"

int main(int argc, char** argv) {
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
  double optimizer_s = 0.0;
  Clock::time_point start;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {
      start = Clock::now();
      optimizer_s = 0.0;
    }
    replica.ComputeGradients(b);
    const auto t0 = Clock::now();
    replica.ApplyGradients(1e-3);
    optimizer_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double tokens_per_s = static_cast<double>(steps * batch * spec.seq_len) / seconds;
  std::printf(
      "{\"impl\": \"narrows\", \"preset\": \"%s\", \"params\": %lld, \"tokens_per_s\": %.1f, "
      "\"step_ms\": %.2f, \"optimizer_ms\": %.3f, \"flops_per_token\": %.0f}\n",
      preset.c_str(), static_cast<long long>(replica.model().num_params()), tokens_per_s,
      1e3 * seconds / static_cast<double>(steps), 1e3 * optimizer_s / static_cast<double>(steps),
      replica.model().TrainFlopsPerToken());
  return 0;
}
