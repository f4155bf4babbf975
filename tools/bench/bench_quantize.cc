// tools/bench/quantize: encode and decode throughput of every outer-gradient codec on this CPU,
// each beside a plain memcpy of the same buffer measured in the same run (the ratio is what is
// compared; absolute numbers move with the machine and its load), and the share of an outer step
// the codec work of one AllReduceSumEncoded costs a worker.
//
//   bench_quantize [--params N] [--workers M] [--inner-steps H] [--step-s S] [--reps R]
//
// Per worker and outer step, AllReduceSumEncoded encodes its whole buffer once (N values, the
// chunks it sends) plus its own chunk's sum (N / M), and decodes M chunks of N / M for the reduction
// plus the M - 1 foreign chunks of the result: about 1 + 1/M encodes and 2 - 1/M decodes of N
// values. The share is that time over H inner steps of S seconds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/codec.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
double MedianSeconds(int reps, Fn&& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace narrows::core;
  int64_t n = 25'000'000;  // a 25M-parameter model's outer gradient (100 MB in fp32)
  int workers = 8, reps = 5;
  double inner_steps = 50, step_s = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (k == "--params") n = static_cast<int64_t>(v);
    else if (k == "--workers") workers = static_cast<int>(v);
    else if (k == "--inner-steps") inner_steps = v;
    else if (k == "--step-s") step_s = v;
    else if (k == "--reps") reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "bench_quantize: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (n <= 0 || workers < 1 || reps < 1 || inner_steps <= 0 || step_s <= 0) {
    std::fprintf(stderr, "bench_quantize: --params, --workers, --reps, --inner-steps and --step-s must be positive\n");
    return 2;
  }
  std::vector<float> values(static_cast<size_t>(n)), out(static_cast<size_t>(n)), copy(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (auto& v : values) v = normal(rng);
  const double bytes = 4.0 * static_cast<double>(n);
  std::printf("%lld values (%.0f MB fp32), %d workers, outer step = %.0f inner steps x %.3f s; median of %d\n",
              static_cast<long long>(n), bytes / 1e6, workers, inner_steps, step_s, reps);
  std::printf("%-6s %8s %12s %12s %12s %12s %12s %12s\n", "format", "bits", "memcpy GB/s", "encode GB/s",
              "decode GB/s", "enc/memcpy", "dec/memcpy", "outer step");
  for (const char* f : {"bf16", "fp16", "int8", "int4", "topk", "sign"}) {
    const Codec codec(*ParseCodec(f));
    std::vector<uint8_t> wire(static_cast<size_t>(codec.EncodedBytes(n)));
    const double mem = MedianSeconds(reps, [&] { std::memcpy(copy.data(), values.data(), static_cast<size_t>(bytes)); });
    const double enc = MedianSeconds(reps, [&] { codec.Encode(values.data(), n, wire.data()); });
    const double dec = MedianSeconds(reps, [&] { codec.Decode(wire.data(), n, out.data()); });
    const double per_step = (1.0 + 1.0 / workers) * enc + (2.0 - 1.0 / workers) * dec;
    std::printf("%-6s %8.2f %12.2f %12.2f %12.2f %11.2fx %11.2fx %11.2f%%\n", f,
                codec.BitsPerValue(), bytes / mem / 1e9, bytes / enc / 1e9, bytes / dec / 1e9, mem / enc, mem / dec,
                100.0 * per_step / (inner_steps * step_s));
  }
  return 0;
}
