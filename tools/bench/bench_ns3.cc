// bench_ns3: the packet-level model beside the analytic one. Used by tools/bench/ns3.
//   bench_ns3 speed   one DiLoCo outer synchronisation (ring all-reduce of a 100 MB pseudo-gradient
//                     among 8 workers, real payloads through the emulator) over 100 Mbit/s and
//                     1 Gbit/s access links at MTU 1500 and 9000: simulated seconds per wall second.
//   bench_ns3 agree   the cases where the two models should agree.
//   bench_ns3 cases   the cases where they should disagree (docs/network-models.md).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "emu/engine.h"
#include "sim/analytic_model.h"
#include "sim/ns3_model.h"

using namespace narrows;

namespace {

using Factory = std::function<std::unique_ptr<sim::NetworkModel>(const sim::Topology&)>;

Factory Analytic(int mtu) {
  return [mtu](const sim::Topology& t) {
    return std::make_unique<sim::AnalyticModel>(t, sim::AnalyticOptions::ForMtu(mtu));
  };
}
Factory Ns3(sim::Ns3Options o) {
  return [o](const sim::Topology& t) { return std::make_unique<sim::Ns3Model>(t, o); };
}

struct Sync {
  double simulated_s, wall_s;
};

Sync OuterSync(const sim::Topology& topology, const Factory& make, int64_t count) {
  const int n = topology.num_workers();
  std::vector<std::vector<float>> data(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(count), 1.0f));
  const auto start = std::chrono::steady_clock::now();
  emu::Engine engine(n, make(topology));
  std::vector<double> finish(static_cast<size_t>(n));
  engine.Run([&](int r) {
    core::CollectiveOptions o;
    o.group.resize(static_cast<size_t>(n));
    std::iota(o.group.begin(), o.group.end(), 0);
    const auto s = core::AllReduceSum(engine.endpoint(r), data[static_cast<size_t>(r)].data(), count, o);
    if (!s.ok()) std::fprintf(stderr, "all-reduce failed: %s\n", s.ToString().c_str());
    finish[static_cast<size_t>(r)] = engine.endpoint(r).clock().Now();
  });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {*std::max_element(finish.begin(), finish.end()), wall};
}

int Speed() {
  const int n = 8;
  const int64_t count = 25'000'000;  // 100 MB of float32
  struct Net {
    const char* name;
    double bps, latency_s;
  };
  const Net nets[] = {{"100 Mbit/s, 30 ms", 100e6, 0.030}, {"1 Gbit/s, 50 ms", 1e9, 0.050}};
  std::printf("one DiLoCo outer sync: ring all-reduce of 100 MB among %d workers (emulated, real payloads)\n", n);
  std::printf("%-18s %5s %-9s %12s %10s %16s\n", "access link", "MTU", "model", "simulated s", "wall s",
              "sim s / wall s");
  bool jumbo_faster_than_real_time = true, jumbo_ran = false;
  for (const auto& net : nets) {
    const sim::Topology topology = sim::Topology::Star(sim::UniformLinks(n, net.bps, net.latency_s));
    for (int mtu : {1500, 9000}) {
      if (std::getenv("MTU") && std::atoi(std::getenv("MTU")) != mtu) continue;
      sim::Ns3Options o;
      o.mtu = mtu;
      for (const auto& [name, make] : {std::pair<const char*, Factory>{"analytic", Analytic(mtu)},
                                       std::pair<const char*, Factory>{"ns3", Ns3(o)}}) {
        const Sync s = OuterSync(topology, make, count);
        const double ratio = s.simulated_s / s.wall_s;
        if (mtu == 9000 && std::strcmp(name, "ns3") == 0) {
          jumbo_ran = true;
          if (ratio < 1.0) jumbo_faster_than_real_time = false;
        }
        std::printf("%-18s %5d %-9s %12.3f %10.2f %16.2f\n", net.name, mtu, name, s.simulated_s, s.wall_s, ratio);
        std::fflush(stdout);
      }
    }
  }
  if (jumbo_ran) {
    std::printf("target: ns3 at MTU 9000 simulates faster than real time in every case: %s\n",
                jumbo_faster_than_real_time ? "met" : "NOT met");
  }
  return 0;
}

void Row(const char* what, double ns3, double analytic) {
  std::printf("%-58s %10.3f %10.3f %7.2fx\n", what, ns3, analytic, ns3 / analytic);
  std::fflush(stdout);
}

double Last(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

double Run(const sim::Topology& t, const std::vector<sim::Message>& m, const Factory& make) {
  auto model = make(t);
  return Last(sim::SimulateMessages(*model, m));
}

int Agree() {
  std::printf("%-58s %10s %10s %8s\n", "where both models should agree (s)", "ns3", "analytic", "ratio");
  for (double bps : {100e6, 1e9}) {
    const sim::Topology two = sim::Topology::Star(sim::UniformLinks(2, bps, 0.010));
    const std::vector<sim::Message> bulk = {{0, 1, 100'000'000, 0.0}};
    const std::string what = "one 100 MB transfer, " + std::to_string(static_cast<int>(bps / 1e6)) + " Mbit/s 10 ms";
    Row(what.c_str(), Run(two, bulk, Ns3({})), Run(two, bulk, Analytic(1500)));
    const sim::Topology four = sim::Topology::Star(sim::UniformLinks(4, bps, 0.010));
    const std::string ring = "ring all-reduce of 100 MB, 4 workers, " + std::to_string(static_cast<int>(bps / 1e6)) +
                             " Mbit/s 10 ms";
    Row(ring.c_str(), OuterSync(four, Ns3({}), 25'000'000).simulated_s,
        OuterSync(four, Analytic(1500), 25'000'000).simulated_s);
  }
  return 0;
}

int Cases() {
  std::printf("%-58s %10s %10s %8s\n", "case (time of the last delivery, s)", "ns3", "analytic", "ratio");
  const Factory analytic = Analytic(1500);
  {  // Incast: 8 workers push 10 MB each into a parameter server, the reduce half of a star all-reduce.
    const int n = 8;
    const sim::Topology t = sim::Topology::Star(sim::UniformLinks(n + 1, 1e9, 0.005));
    std::vector<sim::Message> m;
    for (int i = 1; i <= n; ++i) m.push_back({i, 0, 10'000'000, 0.0});
    sim::Ns3Options bdp, shallow;
    shallow.queue_packets = 100;
    Row("incast 8 x 10 MB -> PS, 1 Gbit/s 5 ms, BDP queue", Run(t, m, Ns3(bdp)), Run(t, m, analytic));
    Row("incast 8 x 10 MB -> PS, 1 Gbit/s 5 ms, 100-packet queue", Run(t, m, Ns3(shallow)), Run(t, m, analytic));
  }
  {  // Slow start on a fresh connection.
    const sim::Topology t = sim::Topology::Star(sim::UniformLinks(2, 1e9, 0.030));
    for (int64_t bytes : {64'000, 1'000'000, 10'000'000, 100'000'000}) {
      const std::string what = "one message of " + std::to_string(bytes / 1000) + " kB, 1 Gbit/s 30 ms (fresh)";
      Row(what.c_str(), Run(t, {{0, 1, bytes, 0.0}}, Ns3({})), Run(t, {{0, 1, bytes, 0.0}}, analytic));
    }
  }
  {  // Loss on the WAN link between two islands.
    for (double loss : {0.0, 0.001, 0.01}) {
      std::vector<sim::Link> wan = sim::UniformLinks(2, 1e9, 0.020, loss);
      const sim::Topology t = sim::Topology::Islands(sim::UniformLinks(4, 100e9, 0.0002), {{0, 1}, {2, 3}}, wan);
      char what[96];
      std::snprintf(what, sizeof what, "50 MB across a 1 Gbit/s 20 ms WAN, %.1f%% loss", loss * 100);
      Row(what, Run(t, {{0, 2, 50'000'000, 0.0}}, Ns3({})), Run(t, {{0, 2, 50'000'000, 0.0}}, analytic));
    }
  }
  {  // Two islands share one WAN link: one flow, then two at once.
    const sim::Topology t = sim::Topology::Islands(sim::UniformLinks(4, 100e9, 0.0002), {{0, 1}, {2, 3}}, sim::UniformLinks(2, 1e9, 0.020));
    const std::vector<sim::Message> one = {{0, 2, 50'000'000, 0.0}};
    const std::vector<sim::Message> two = {{0, 2, 50'000'000, 0.0}, {1, 3, 50'000'000, 0.0}};
    Row("islands: 1 flow of 50 MB over the shared 1 Gbit/s WAN", Run(t, one, Ns3({})), Run(t, one, analytic));
    Row("islands: 2 flows of 50 MB over the shared 1 Gbit/s WAN", Run(t, two, Ns3({})), Run(t, two, analytic));
  }
  {  // A 10 s outage in the middle of a transfer.
    std::vector<sim::Link> links = sim::UniformLinks(2, 100e6, 0.030);
    links[0].schedule = {{2.0, 0.0}, {12.0, 100e6}};
    const sim::Topology t = sim::Topology::Star(links);
    Row("100 MB at 100 Mbit/s 30 ms, uplink down from 2 s to 12 s", Run(t, {{0, 1, 100'000'000, 0.0}}, Ns3({})),
        Run(t, {{0, 1, 100'000'000, 0.0}}, analytic));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "speed";
  if (mode == "speed") return Speed();
  if (mode == "cases") return Cases();
  if (mode == "agree") return Agree();
  std::fprintf(stderr, "usage: bench_ns3 [speed|agree|cases]\n");
  return 2;
}
