// bench_ns3: the packet-level model beside the analytic one. Used by tools/bench/ns3.
//   bench_ns3 speed   one DiLoCo outer synchronisation (ring all-reduce of a 100 MB pseudo-gradient
//                     among 8 workers, real payloads through the emulator) over 100 Mbit/s and
//                     1 Gbit/s access links at MTU 1500 and 9000: simulated seconds per wall second.
//   bench_ns3 steady  one long transfer at full packet level and with fast-forward.
//   bench_ns3 agree   the cases where the two models should agree.
//   bench_ns3 cases   the cases where they should disagree (docs/explanation/network-models.md).
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
// FAST_FORWARD=0 in the environment runs every ns-3 row at full packet level; RTO=rfc6298 with
// RFC 6298's retransmission timeout (at least 1 s) instead of Linux's.
Factory Ns3(sim::Ns3Options o) {
  if (const char* ff = std::getenv("FAST_FORWARD"); ff != nullptr && std::strcmp(ff, "0") == 0) o.fast_forward = false;
  if (const char* rto = std::getenv("RTO"); rto != nullptr && std::strcmp(rto, "rfc6298") == 0) o.linux_rto = false;
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

// Beside full packet level (FULL=0 leaves it out: at 1 Gbit/s and MTU 1500 it takes many minutes),
// fast-forward's speed and its error against full packet level.
int Speed() {
  const int n = 8;
  const int64_t count = 25'000'000;  // 100 MB of float32
  struct Net {
    const char* name;
    double bps, latency_s;
  };
  const Net nets[] = {{"100 Mbit/s, 30 ms", 100e6, 0.030}, {"1 Gbit/s, 50 ms", 1e9, 0.050}};
  const bool full = !std::getenv("FULL") || std::atoi(std::getenv("FULL")) != 0;
  std::printf("one DiLoCo outer sync: ring all-reduce of 100 MB among %d workers (emulated, real payloads)\n", n);
  std::printf("%-18s %5s %-13s %12s %10s %16s %12s\n", "access link", "MTU", "model", "simulated s", "wall s",
              "sim s / wall s", "vs full");
  for (const auto& net : nets) {
    const sim::Topology topology = sim::Topology::Star(sim::UniformLinks(n, net.bps, net.latency_s));
    for (int mtu : {1500, 9000}) {
      if (std::getenv("MTU") && std::atoi(std::getenv("MTU")) != mtu) continue;
      sim::Ns3Options packets, forward;
      packets.mtu = forward.mtu = mtu;
      packets.fast_forward = false;
      double reference = 0.0;
      for (const auto& [name, make] : {std::pair<const char*, Factory>{"analytic", Analytic(mtu)},
                                       std::pair<const char*, Factory>{"ns3", Ns3(packets)},
                                       std::pair<const char*, Factory>{"ns3 ff", Ns3(forward)}}) {
        if (!full && std::strcmp(name, "ns3") == 0) continue;
        const Sync s = OuterSync(topology, make, count);
        if (std::strcmp(name, "ns3") == 0) reference = s.simulated_s;
        char versus[32] = "-";
        if (std::strcmp(name, "ns3 ff") == 0 && reference > 0) {
          std::snprintf(versus, sizeof versus, "%+.2f%%", 100 * (s.simulated_s / reference - 1));
        }
        std::printf("%-18s %5d %-13s %12.3f %10.2f %16.3f %12s\n", net.name, mtu, name, s.simulated_s, s.wall_s,
                    s.simulated_s / s.wall_s, versus);
        std::fflush(stdout);
      }
    }
  }
  std::printf("targets: ns3 ff at least 10x real time at 100 Mbit/s and 1x at 1 Gbit/s (MTU 1500), within 1%% of full ns3\n");
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

// One bulk transfer between two workers, full packet level beside fast-forward: the regime
// fast-forward is for (a transfer of many round trips on a busy link). Arguments give one case:
// BYTES BPS ONE_WAY_LATENCY_S [MTU].
int Steady(int argc, char** argv) {
  struct Case {
    int64_t bytes;
    double bps, latency_s;
    int mtu;
  };
  std::vector<Case> cases = {{100'000'000, 100e6, 0.010, 1500}, {1'000'000'000, 100e6, 0.030, 1500},
                             {200'000'000, 1e9, 0.010, 1500}, {1'000'000'000, 1e9, 0.010, 9000}};
  if (argc > 4) {
    cases = {{std::atoll(argv[2]), std::atof(argv[3]), std::atof(argv[4]), argc > 5 ? std::atoi(argv[5]) : 1500}};
  }
  std::printf("%-34s %-7s %12s %9s %9s %10s %8s %10s\n", "one transfer, 2 workers", "model", "simulated s", "wall s",
              "events", "sim/wall", "jumps", "vs full");
  for (const Case& c : cases) {
    char what[64];
    std::snprintf(what, sizeof what, "%lld MB, %g Mbit/s %g ms, MTU %d", static_cast<long long>(c.bytes / 1'000'000),
                  c.bps / 1e6, c.latency_s * 1e3, c.mtu);
    const sim::Topology two = sim::Topology::Star(sim::UniformLinks(2, c.bps, c.latency_s));
    double reference = 0.0;
    for (bool fast_forward : {false, true}) {
      sim::Ns3Options o;
      o.mtu = c.mtu;
      o.fast_forward = fast_forward;
      const auto start = std::chrono::steady_clock::now();
      sim::Ns3Model model(two, o);
      const double t = Last(sim::SimulateMessages(model, {{0, 1, c.bytes, 0.0}}));
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char versus[32] = "-";
      if (fast_forward) std::snprintf(versus, sizeof versus, "%+.3f%%", 100 * (t / reference - 1));
      reference = t;
      std::printf("%-34s %-7s %12.4f %9.2f %9llu %10.2f %8lld %10s\n", what, fast_forward ? "ns3 ff" : "ns3", t, wall,
                  static_cast<unsigned long long>(model.events()), t / wall, static_cast<long long>(model.jumps()), versus);
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "speed";
  if (mode == "steady") return Steady(argc, argv);
  if (mode == "speed") return Speed();
  if (mode == "cases") return Cases();
  if (mode == "agree") return Agree();
  std::fprintf(stderr, "usage: bench_ns3 [speed|steady|agree|cases]\n");
  return 2;
}
