#include "tools/cli/linkemu_command.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "emu/network_from_scenario.h"

namespace narrows::tools {
namespace {

template <typename... Args>
std::string Line(const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t EmulatedNetwork::Address(int worker) { return deploy::Ipv4(10, 77, 0, 0) + static_cast<uint32_t>(worker) + 1; }

EmulatedNetwork::~EmulatedNetwork() {
  emulator.reset();
  for (const auto& name : published) deploy::NetNamespace::Unpublish(name);
}

core::Result<std::unique_ptr<EmulatedNetwork>> StartEmulatedNetwork(const core::Scenario& sc,
                                                                    const std::string& publish_prefix,
                                                                    const std::string& tcp,
                                                                    const std::string& packet_log) {
  if (core::Status s = deploy::CheckNetworkPrivileges(); !s.ok()) {
    return core::Status::InvalidArgument("the link emulator needs network namespaces and TUN devices: " + s.message());
  }
  const int n = sc.workers.count;
  if (n > 250) return core::Status::InvalidArgument("the link emulator addresses at most 250 workers (10.77.0.1-250)");
  auto net = std::make_unique<EmulatedNetwork>();
  std::vector<deploy::TunDevice> tuns;
  for (int w = 0; w < n; ++w) {
    auto ns = deploy::NetNamespace::Create();
    if (!ns.ok()) return ns.status();
    auto tun = deploy::CreateTun(*ns, "narrows0", EmulatedNetwork::Address(w), 24, sc.network.mtu);
    if (!tun.ok()) return tun.status();
    tuns.push_back(*tun);
    if (!tcp.empty()) {
      if (core::Status s = deploy::SetSysctl(*ns, "net/ipv4/tcp_congestion_control", tcp); !s.ok()) {
        return core::Status::InvalidArgument("TCP congestion control '" + tcp + "' (see " +
                                             "/proc/sys/net/ipv4/tcp_allowed_congestion_control, which a namespace may use): " + s.message());
      }
    }
    if (!publish_prefix.empty()) {
      const std::string name = publish_prefix + "-" + std::to_string(w);
      NARROWS_RETURN_IF_ERROR(ns->Publish(name));
      net->published.push_back(name);
    }
    net->namespaces.push_back(std::move(*ns));
  }
  const sim::Topology topology = emu::TopologyFromScenario(sc);
  deploy::LinkEmulatorOptions o;
  o.workers = n;
  o.subnet = deploy::Ipv4(10, 77, 0, 0);
  o.seed = static_cast<uint64_t>(sc.seed);
  o.packet_log = packet_log;
  o.nic_bps = sc.network.nic_bps;
  for (const sim::Link& l : topology.links()) {
    deploy::EmulatedLink e;
    e.name = l.name;
    e.bandwidth_bps = l.bandwidth_bps;
    e.latency_s = l.latency_s;
    e.loss = l.loss;
    e.burst = l.burst;
    if (sc.network.queue_ms > 0.0) {
      e.queue_bytes = std::max<int64_t>(64 << 10, std::llround(l.bandwidth_bps / 8.0 * sc.network.queue_ms / 1000.0));
    }
    for (const auto& c : l.schedule) e.schedule.push_back({c.at_s, c.bandwidth_bps});
    o.links.push_back(e);
  }
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      const sim::Path route = topology.Route(s, d);
      o.routes.emplace_back(route.begin(), route.end());
    }
  }
  auto emulator = deploy::LinkEmulator::Create(std::move(o), std::move(tuns));
  if (!emulator.ok()) return emulator.status();
  net->emulator = std::move(*emulator);
  net->started_s = SteadySeconds();
  net->emulator->Start();
  return net;
}

EmulatedNetwork::Report EmulatedNetwork::Stop() {
  emulator->Stop();
  Report report{emulator->Stats(), SteadySeconds() - started_s, emulator->cpu_s(), {}};
  for (const auto& ns : namespaces) {
    std::map<std::string, int64_t> counters;
    if (auto all = deploy::TcpCounters(ns); all.ok()) {
      for (const auto& [name, value] : *all) {
        if (value != 0) counters[name] = value;
      }
    }
    report.tcp.push_back(std::move(counters));
  }
  return report;
}

nlohmann::json EmulatedNetwork::Report::Json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : links) {
    out.push_back({{"link", s.name},
                   {"packets", s.packets},
                   {"bytes", s.bytes},
                   {"mean_bps", s.MeanBps(seconds)},
                   {"dropped_loss", s.dropped_loss},
                   {"dropped_queue", s.dropped_queue},
                   {"dropped_down", s.dropped_down},
                   {"queue_delay_mean_s", s.MeanQueueDelayS()},
                   {"queue_delay_max_s", s.queue_delay_max_s},
                   {"delivered", s.delivered},
                   {"late_mean_s", s.MeanLateS()},
                   {"late_max_s", s.late_max_s},
                   {"late_over_1ms", s.late_over_1ms}});
  }
  const deploy::LinkStats all = Delivered();
  return {{"seconds", seconds},
          {"cpu_s", cpu_s},
          {"delivered", all.delivered},
          {"late_mean_s", all.MeanLateS()},
          {"late_max_s", all.late_max_s},
          {"late_over_1ms", all.late_over_1ms},
          {"tcp", tcp},
          {"links", out}};
}

deploy::LinkStats EmulatedNetwork::Report::Delivered() const {
  deploy::LinkStats all;
  for (const auto& s : links) {
    all.delivered += s.delivered;
    all.late_over_1ms += s.late_over_1ms;
    all.late_sum_s += s.late_sum_s;
    all.late_max_s = std::max(all.late_max_s, s.late_max_s);
  }
  return all;
}

std::string EmulatedNetwork::Report::Table() const {
  std::vector<deploy::LinkStats> sorted = links;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::string out = Line("%-12s %12s %10s %10s %9s %9s %9s %12s %12s %12s\n", "link", "bytes", "packets", "mean",
                         "lost", "queue-full", "down", "queue mean", "queue max", "late mean");
  for (const auto& s : sorted) {
    out += Line("%-12s %12lld %10lld %7.1f Mb %9lld %9lld %9lld %9.2f ms %9.2f ms %9.3f ms\n", s.name.c_str(),
                static_cast<long long>(s.bytes), static_cast<long long>(s.packets), s.MeanBps(seconds) / 1e6,
                static_cast<long long>(s.dropped_loss), static_cast<long long>(s.dropped_queue),
                static_cast<long long>(s.dropped_down), 1e3 * s.MeanQueueDelayS(), 1e3 * s.queue_delay_max_s,
                1e3 * s.MeanLateS());
  }
  out += Line("forwarding took %.2f s of CPU over %.1f s (%.1f%% of one core)\n", cpu_s, seconds,
              seconds > 0 ? 100.0 * cpu_s / seconds : 0.0);
  const deploy::LinkStats all = Delivered();
  if (all.delivered > 0) {
    out += Line("packets delivered after they were due: %.3f ms on average, %.2f ms at most; %.2f%% over 1 ms\n",
                1e3 * all.MeanLateS(), 1e3 * all.late_max_s,
                100.0 * static_cast<double>(all.late_over_1ms) / static_cast<double>(all.delivered));
  }
  return out;
}

core::Status LinkEmuCommand(const core::Scenario& sc, const LinkEmuOptions& options) {
  // Blocked before any thread starts, so that only sigwait below takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto net = StartEmulatedNetwork(sc, options.prefix, options.tcp, options.packet_log);
  if (!net.ok()) return net.status();
  std::printf("link emulator: %d workers, network %s\n", sc.workers.count, sc.network.profile.c_str());
  for (int w = 0; w < sc.workers.count; ++w) {
    std::printf("  worker %d: %s in namespace %s-%d (ip netns exec %s-%d COMMAND)\n", w,
                deploy::Ipv4Text(EmulatedNetwork::Address(w)).c_str(), options.prefix.c_str(), w,
                options.prefix.c_str(), w);
  }
  if (options.seconds > 0) {
    std::printf("running for %.0f s\n", options.seconds);
  } else {
    std::printf("running until interrupted (Ctrl-C)\n");
  }
  std::fflush(stdout);
  if (options.seconds > 0) {
    timespec limit{static_cast<time_t>(options.seconds),
                   static_cast<long>((options.seconds - static_cast<double>(static_cast<time_t>(options.seconds))) * 1e9)};
    sigtimedwait(&stop, nullptr, &limit);
  } else {
    int signal = 0;
    sigwait(&stop, &signal);
  }
  const EmulatedNetwork::Report report = (*net)->Stop();
  std::printf("%s", report.Table().c_str());
  if (!options.stats_file.empty()) {
    std::ofstream out(options.stats_file);
    out << report.Json().dump(1) << "\n";
    if (!out) return core::Status::IoError(options.stats_file + ": cannot write the links' statistics");
  }
  return core::Status::Ok();
}

}  // namespace narrows::tools
