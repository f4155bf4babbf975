// bench_collectives: collectives run through the emulator against their closed forms, and what the
// emulation costs the host per emulated byte. Used by tools/bench/collectives.
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

#include "core/collectives.h"
#include "emu/engine.h"
#include "sim/analytic_model.h"

using namespace narrows;

int main() {
  struct Net {
    const char* name;
    double bps, latency_s;
  };
  const Net nets[] = {{"home-100m", 100e6, 0.030}, {"internet-1g", 1e9, 0.050}, {"region-10g", 10e9, 0.010}};
  std::printf("%-12s %-5s %3s %9s %12s %12s %8s %14s\n", "network", "algo", "n", "MB", "emulated s",
              "closed form", "error", "host ns/byte");
  double worst = 0.0;
  for (const auto& net : nets) {
    for (auto algo : {core::AllReduceAlgorithm::kRing, core::AllReduceAlgorithm::kStar}) {
      for (int n : {2, 4, 8}) {
        for (int64_t mb : {1, 25, 100}) {
          const int64_t count = mb * 1'000'000 / 4;
          emu::Engine engine(n, std::make_unique<sim::AnalyticModel>(
                                    sim::Topology::Star(sim::UniformLinks(n, net.bps, net.latency_s))));
          std::vector<double> finish(static_cast<size_t>(n));
          std::vector<int64_t> sent(static_cast<size_t>(n));
          std::vector<std::vector<float>> data(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(count), 1.0f));
          const auto start = std::chrono::steady_clock::now();
          engine.Run([&](int r) {
            core::CollectiveOptions o;
            o.group.resize(static_cast<size_t>(n));
            std::iota(o.group.begin(), o.group.end(), 0);
            o.algorithm = algo;
            const auto s = core::AllReduceSum(engine.endpoint(r), data[static_cast<size_t>(r)].data(), count, o);
            if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
            finish[static_cast<size_t>(r)] = engine.endpoint(r).clock().Now();
            sent[static_cast<size_t>(r)] = engine.endpoint(r).stats().bytes_sent;
          });
          const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          double emulated = 0.0;
          for (double f : finish) emulated = std::max(emulated, f);
          const double bits = count * 32.0;
          const bool ring = algo == core::AllReduceAlgorithm::kRing;
          // Ring: 2(n-1) alpha + 2(n-1)/n S/B. Star: reduce into the root's downlink, then send
          // n-1 copies from its uplink: 2 alpha + 2(n-1) S/B.
          const double closed = ring ? 2.0 * (n - 1) * net.latency_s + 2.0 * (n - 1) / n * bits / net.bps
                                     : 2.0 * net.latency_s + 2.0 * (n - 1) * bits / net.bps;
          const double error = emulated / closed - 1.0;
          worst = std::max(worst, std::abs(error));
          const double total_bytes = static_cast<double>(std::accumulate(sent.begin(), sent.end(), int64_t{0}));
          std::printf("%-12s %-5s %3d %9lld %12.4f %12.4f %7.2f%% %14.3f\n", net.name, ring ? "ring" : "star", n,
                      static_cast<long long>(mb), emulated, closed, 100.0 * error, 1e9 * host / total_bytes);
        }
      }
    }
  }
  std::printf("largest deviation from the closed forms: %.2f%% (target: within 1%%)\n", 100.0 * worst);
  return worst <= 0.01 ? 0 : 1;
}
