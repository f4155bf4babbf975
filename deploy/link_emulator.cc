#include "deploy/link_emulator.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <queue>
#include <random>
#include <thread>

namespace narrows::deploy {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct LinkEmulator::Impl {
  struct Packet {
    std::vector<uint8_t> bytes;
    int src = 0;
    int dst = 0;
    const std::vector<int>* route = nullptr;
    size_t hop = 0;
  };
  struct Event {
    double at;
    uint64_t order;  // ties in arrival order
    std::shared_ptr<Packet> packet;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  struct LinkState {
    EmulatedLink link;
    double free_at = 0.0;  // when the link finishes sending what it has
    size_t next_change = 0;
    double bandwidth = 0.0;
    core::LossStates loss;  // its loss now: the good state's, or a burst's
  };

  LinkEmulatorOptions o;
  std::vector<TunDevice> tuns;
  asio::io_context io{1};  // one thread runs it: no locking inside
  std::vector<std::unique_ptr<asio::posix::stream_descriptor>> devices;
  std::vector<std::vector<uint8_t>> read_buffers;
  asio::steady_timer timer{io};
  // The timer waits for the earliest event; it is set again only for a sooner one (setting it costs
  // system calls, and nearly every packet's event comes after those already waiting).
  bool armed = false;
  double armed_at = 0.0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  uint64_t order = 0;
  std::vector<LinkState> links;
  std::vector<double> nic_free_at;  // per worker: when its interface has sent what it has (nic_bps)
  std::unique_ptr<std::atomic<bool>[]> cut;  // per link: cut by Partition (set from any thread)
  std::mt19937_64 rng;
  std::uniform_real_distribution<double> uniform{0.0, 1.0};
  Clock::time_point start = Clock::now();
  std::thread thread;
  mutable std::mutex mu;  // guards stats
  std::vector<LinkStats> stats;
  double cpu_s = 0.0;  // the loop thread's CPU time, once it stopped
  std::FILE* log = nullptr;  // options' packet_log: written by the loop thread alone

  // One line of the packet log (LinkEmulatorOptions::packet_log).
  void Log(double t, int link, const Packet& p, const char* event, double wait_s) {
    if (!log) return;
    const uint8_t* b = p.bytes.data();
    unsigned sport = 0, dport = 0;
    const size_t header = static_cast<size_t>(b[0] & 0x0f) * 4;  // IPv4's, checked by OnPacket
    if ((b[9] == 6 || b[9] == 17) && p.bytes.size() >= header + 4) {
      sport = static_cast<unsigned>(b[header] << 8 | b[header + 1]);
      dport = static_cast<unsigned>(b[header + 2] << 8 | b[header + 3]);
    }
    std::fprintf(log, "%.6f,%s,%d,%d,%u,%u,%s,%zu,%.6f\n", t, o.links[static_cast<size_t>(link)].name.c_str(), p.src, p.dst,
                 sport, dport, event, p.bytes.size(), wait_s);
  }

  double Now() const { return std::chrono::duration<double>(Clock::now() - start).count(); }

  void Read(int w) {
    devices[static_cast<size_t>(w)]->async_read_some(
        asio::buffer(read_buffers[static_cast<size_t>(w)]), [this, w](const boost::system::error_code& ec, size_t n) {
          if (ec) return;  // closed: the loop is stopping
          OnPacket(w, n);
          // What else the device has queued is read at once (the descriptor is non-blocking once
          // Asio waited on it), up to a bound so that other devices and due events are not starved.
          auto& buffer = read_buffers[static_cast<size_t>(w)];
          for (int i = 0; i < 64; ++i) {
            const ssize_t more = ::read(tuns[static_cast<size_t>(w)].fd, buffer.data(), buffer.size());
            if (more <= 0) break;
            OnPacket(w, static_cast<size_t>(more));
          }
          Read(w);
        });
  }

  void OnPacket(int src, size_t n) {
    const uint8_t* p = read_buffers[static_cast<size_t>(src)].data();
    int dst = -1;
    if (n >= 20 && (p[0] >> 4) == 4) {
      uint32_t address = 0;
      std::memcpy(&address, p + 16, 4);
      const int64_t host = static_cast<int64_t>(ntohl(address)) - static_cast<int64_t>(o.subnet) - 1;
      if (host >= 0 && host < o.workers && host != src) dst = static_cast<int>(host);
    }
    if (dst < 0) return;  // not IPv4, or not to another worker (IPv6 neighbour discovery, ...)
    auto packet = std::make_shared<Packet>();
    packet->bytes.assign(p, p + n);
    packet->src = src;
    packet->dst = dst;
    packet->route = &o.routes[static_cast<size_t>(src * o.workers + dst)];
    const double now = Now();
    if (o.nic_bps <= 0.0) return Forward(std::move(packet), now);
    // Through the worker's interface: its packets leave in order, each size / rate after the last.
    double& free_at = nic_free_at[static_cast<size_t>(src)];
    free_at = std::max(free_at, now) + static_cast<double>(n) * 8.0 / o.nic_bps;
    events.push({free_at, order++, std::move(packet)});
    Arm();
  }

  // The packet reaches the queue of its route's next link at `t` (or its destination).
  void Forward(std::shared_ptr<Packet> packet, double t) {
    if (packet->hop == packet->route->size()) {
      const auto& bytes = packet->bytes;
      const double late = std::max(0.0, Now() - t);  // t: when the last link delivered it
      {
        // Counted before the write: whoever reads the statistics after the packet arrived sees it.
        std::lock_guard<std::mutex> lock(mu);
        LinkStats& st = stats[static_cast<size_t>(packet->route->back())];
        ++st.delivered;
        st.late_sum_s += late;
        st.late_max_s = std::max(st.late_max_s, late);
        if (late > 1e-3) ++st.late_over_1ms;
      }
      Log(Now(), packet->route->back(), *packet, "delivered", late);
      // A TUN write takes the whole packet or fails (a full queue in the namespace: dropped there).
      [[maybe_unused]] ssize_t w = ::write(tuns[static_cast<size_t>(packet->dst)].fd, bytes.data(), bytes.size());
      return;
    }
    const int index = (*packet->route)[packet->hop];
    LinkState& l = links[static_cast<size_t>(index)];
    while (l.next_change < l.link.schedule.size() && l.link.schedule[l.next_change].at_s <= t) {
      l.bandwidth = l.link.schedule[l.next_change++].bandwidth_bps;
    }
    const double size = static_cast<double>(packet->bytes.size());
    std::lock_guard<std::mutex> lock(mu);
    LinkStats& st = stats[static_cast<size_t>(index)];
    if (l.bandwidth <= 0.0 || cut[static_cast<size_t>(index)].load(std::memory_order_relaxed)) {
      ++st.dropped_down;
      return Log(t, index, *packet, "down", 0.0);
    }
    l.loss.WalkTo(t);
    if (l.loss.loss() > 0.0 && uniform(rng) < l.loss.loss()) {
      ++st.dropped_loss;
      return Log(t, index, *packet, "loss", 0.0);
    }
    const double backlog = std::max(0.0, l.free_at - t) * l.bandwidth / 8.0;
    if (backlog + size > static_cast<double>(l.link.queue_bytes)) {
      ++st.dropped_queue;
      return Log(t, index, *packet, "queue", 0.0);
    }
    const double begin = std::max(t, l.free_at);
    l.free_at = begin + size * 8.0 / l.bandwidth;
    ++st.packets;
    st.bytes += static_cast<int64_t>(size);
    st.queue_delay_sum_s += begin - t;
    st.queue_delay_max_s = std::max(st.queue_delay_max_s, begin - t);
    Log(t, index, *packet, "sent", begin - t);
    ++packet->hop;
    events.push({l.free_at + l.link.latency_s, order++, std::move(packet)});
    Arm();
  }

  void Arm() {
    if (events.empty()) return;
    const double at = events.top().at;
    if (armed && at >= armed_at) return;  // the wait set already ends first
    armed = true;
    armed_at = at;
    timer.expires_at(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // set again for a sooner event (that wait is pending), or stopping
      armed = false;
      const double now = Now();
      while (!events.empty() && events.top().at <= now) {
        Event e = events.top();
        events.pop();
        Forward(std::move(e.packet), e.at);
      }
      Arm();
    });
  }
};

LinkEmulator::LinkEmulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

core::Result<std::unique_ptr<LinkEmulator>> LinkEmulator::Create(LinkEmulatorOptions options, std::vector<TunDevice> tuns) {
  const int n = options.workers;
  if (n < 1 || static_cast<int>(tuns.size()) != n) {
    return core::Status::InvalidArgument("link emulator: " + std::to_string(tuns.size()) + " TUN devices for " +
                                         std::to_string(n) + " workers");
  }
  if (options.routes.size() != static_cast<size_t>(n) * static_cast<size_t>(n)) {
    return core::Status::InvalidArgument("link emulator: routes must be workers x workers");
  }
  for (const auto& route : options.routes) {
    for (int l : route) {
      if (l < 0 || l >= static_cast<int>(options.links.size())) {
        return core::Status::InvalidArgument("link emulator: a route names link " + std::to_string(l));
      }
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->rng.seed(options.seed * 0x9E3779B97F4A7C15ULL + 1);
  for (auto& link : options.links) {
    if (link.queue_bytes <= 0) {
      link.queue_bytes = std::max<int64_t>(64 << 10, static_cast<int64_t>(link.bandwidth_bps * 0.1 / 8.0));
    }
    impl->links.push_back({link, 0.0, 0, link.bandwidth_bps, core::LossStates(link.loss, link.burst)});
    LinkStats s;
    s.name = link.name;
    impl->stats.push_back(s);
  }
  if (!options.packet_log.empty()) {
    impl->log = std::fopen(options.packet_log.c_str(), "w");
    if (!impl->log) {
      return core::Status::IoError("link emulator: cannot write the packet log " + options.packet_log + ": " +
                                   std::strerror(errno));
    }
    std::setvbuf(impl->log, nullptr, _IOFBF, 1 << 20);
    std::fputs("time_s,link,src,dst,sport,dport,event,bytes,wait_s\n", impl->log);
  }
  impl->cut = std::make_unique<std::atomic<bool>[]>(impl->links.size());
  for (size_t l = 0; l < impl->links.size(); ++l) impl->cut[l] = false;
  if (options.nic_bps < 0.0) return core::Status::InvalidArgument("link emulator: a negative interface rate");
  impl->nic_free_at.assign(static_cast<size_t>(n), 0.0);
  impl->o = std::move(options);
  impl->tuns = std::move(tuns);
  for (const auto& tun : impl->tuns) {
    impl->devices.push_back(std::make_unique<asio::posix::stream_descriptor>(impl->io, ::dup(tun.fd)));
    impl->read_buffers.emplace_back(65536);
  }
  return std::unique_ptr<LinkEmulator>(new LinkEmulator(std::move(impl)));
}

LinkEmulator::~LinkEmulator() {
  Stop();
  for (auto& tun : impl_->tuns) ::close(tun.fd);
}

void LinkEmulator::Start() {
  Impl& x = *impl_;
  x.start = Clock::now();
  for (const auto& tun : x.tuns) ::fcntl(tun.fd, F_SETFL, ::fcntl(tun.fd, F_GETFL) | O_NONBLOCK);  // Read drains with ::read
  for (int w = 0; w < x.o.workers; ++w) x.Read(w);
  x.thread = std::thread([&x] {
    x.io.run();
    timespec cpu{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    x.cpu_s = static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec);
  });
}

void LinkEmulator::Stop() {
  if (impl_->thread.joinable()) {
    impl_->io.stop();
    impl_->thread.join();
  }
  if (impl_->log) {
    std::fclose(impl_->log);
    impl_->log = nullptr;
  }
}

std::vector<LinkStats> LinkEmulator::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void LinkEmulator::Partition(int worker, bool cut) {
  const Impl& x = *impl_;
  const int n = x.o.workers;
  if (worker < 0 || worker >= n) return;
  for (int other = 0; other < n; ++other) {
    if (other == worker) continue;
    const auto& out = x.o.routes[static_cast<size_t>(worker * n + other)];
    const auto& in = x.o.routes[static_cast<size_t>(other * n + worker)];
    if (!out.empty()) x.cut[static_cast<size_t>(out.front())] = cut;
    if (!in.empty()) x.cut[static_cast<size_t>(in.back())] = cut;
  }
}

double LinkEmulator::cpu_s() const { return impl_->thread.joinable() ? 0.0 : impl_->cpu_s; }


}  // namespace narrows::deploy
