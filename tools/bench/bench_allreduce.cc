// bench_allreduce: ring all-reduce of float32 among processes on loopback, narrows (core::AllReduceSum
// over deploy::ZmqTransport: plain TCP in 1 MiB pieces over ZeroMQ, over the bulk plane with 1 and
// 4 connections per peer, plain TCP in whole chunks, CURVE in 1 MiB pieces over ZeroMQ and over the
// sealed bulk plane) beside Gloo
// (AllreduceRing and AllreduceRingChunked over its TCP transport), measured in the same run.
// `one p2p-IMPL ...` sends the buffer from rank 0 to rank 1 instead (tools/bench/wan). For one
// process: BENCH_BIND (the interface to bind, as between namespaces), BENCH_SEND_AHEAD (the ring's
// bytes ahead of its receives), BULK_COUNTS=1 (print where the bulk plane put what it received),
// BENCH_GAP_S (seconds each rank sleeps before each round's barrier, as a step's compute leaves the
// connections idle: TCP's restart after idle then shapes the round).
//
// Prints per case the time per all-reduce and the bus bandwidth (NCCL-tests' convention:
// S/t · 2(n-1)/n, the bytes each rank's link carries per second), and narrows' ratio to the best
// Gloo algorithm. `bench_allreduce [ITERS]` runs the driver: for each case, ROUNDS times (default
// 3), it starts n processes of itself (`bench_allreduce one IMPL RANK N COUNT ITERS RENDEZVOUS OUT`)
// per implementation and reads rank 0's result; a case's figure is the median over its rounds (a
// round that failed left out). IMPLS=narrows,narrows-bulk runs those beside Gloo's two alone;
// CASE=4x64 runs that case alone.
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/collectives.h"
#include "deploy/zmq_transport.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void Fill(std::vector<float>& v, int rank) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i % 97) * 0.01 + rank);
}

// Checks the result of summing Fill over n ranks (exact: small integers and hundredths).
bool Correct(const std::vector<float>& v, int n) {
  for (size_t i = 0; i < v.size(); i += 4099) {
    const double want = n * ((i % 97) * 0.01) + n * (n - 1) / 2.0;
    if (std::abs(v[i] - want) > 1e-3 * std::max(1.0, want)) {
      std::fprintf(stderr, "element %zu of %zu: %g, expected %g\n", i, v.size(), v[i], want);
      return false;
    }
  }
  return true;
}

// Runs `iters` timed all-reduces after two warm-up ones; before each (untimed) the buffer is
// refilled from `pattern` and the ranks meet at `barrier`, so that every rank starts the clock
// together and no rank's refill runs beside another's all-reduce. Returns the median seconds, or -1.
template <typename Barrier, typename Fn>
double Time(int iters, std::vector<float>& data, const std::vector<float>& pattern, Barrier&& barrier,
            Fn&& allreduce) {
  // BENCH_GAP_S: seconds to sleep before each barrier (the header comment).
  double gap_s = 0.0;
  if (const char* gap = std::getenv("BENCH_GAP_S")) {
    char* end = nullptr;
    gap_s = std::strtod(gap, &end);
    if (end == gap || *end != '\0' || !(gap_s >= 0.0 && gap_s <= 3600.0)) {
      std::fprintf(stderr, "bench_allreduce: BENCH_GAP_S '%s': expected seconds from 0 to 3600\n", gap);
      std::exit(2);
    }
  }
  auto setup = [&] {
    std::copy(pattern.begin(), pattern.end(), data.begin());
    if (gap_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(gap_s));
    return barrier();
  };
  for (int i = 0; i < 2; ++i) {
    if (!setup() || !allreduce()) return -1;
  }
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    if (!setup()) return -1;
    const auto a = Clock::now();
    if (!allreduce()) return -1;
    t.push_back(Seconds(a, Clock::now()));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Gloo's ring (gloo-ring) or chunked ring (gloo-ring-chunked) over its TCP transport: the median
// seconds; `*ok` says whether the check sum came out right.
double OneGloo(const std::string& impl, int rank, int n, int64_t count, int iters, const std::string& rendezvous,
               std::vector<float>& data, const std::vector<float>& pattern, bool* ok) {
  double seconds = -1;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(rendezvous);
  gloo::rendezvous::PrefixStore store("bench", file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
  context->connectFullMesh(store, device);
  std::vector<float*> ptrs = {data.data()};
  auto run = [&](auto& algorithm) {
    seconds = Time(iters, data, pattern, [&] {
      gloo::BarrierAllToAll(context).run();
      return true;
    }, [&] {
      algorithm.run();
      return true;
    });
  };
  if (impl == "gloo-ring") {
    gloo::AllreduceRing<float> a(context, ptrs, static_cast<int>(count));
    run(a);
  } else {
    gloo::AllreduceRingChunked<float> a(context, ptrs, static_cast<int>(count));
    run(a);
  }
  Fill(data, rank);
  gloo::AllreduceRing<float>(context, ptrs, static_cast<int>(count)).run();
  *ok = Correct(data, n);
  gloo::BarrierAllToAll(context).run();  // everyone has finished before anyone leaves
  return seconds;
}

// The transport's options for a narrows implementation: narrows-bulk has 1 bulk connection per
// peer, -bulkK K; -curve is sealed (its keys are read by the caller).
narrows::deploy::ZmqOptions NarrowsOptions(const std::string& impl, int rank, int n, const std::string& rendezvous) {
  narrows::deploy::ZmqOptions o;
  o.rank = rank;
  o.world_size = n;
  o.master = rendezvous;
  o.bind_host = std::getenv("BENCH_BIND") ? std::getenv("BENCH_BIND") : "127.0.0.1";  // "*" between namespaces
  o.curve = impl.find("curve") != std::string::npos;
  if (const size_t b = impl.find("bulk"); b != std::string::npos) {  // narrows-bulk: 1 connection; -bulkK: K
    o.bulk_streams = b + 4 < impl.size() ? std::atoi(impl.c_str() + b + 4) : 1;
  }
  return o;
}

// Point to point (2 ranks): rank 0 sends the buffer to rank 1 in 1 MiB pieces, all at once, and
// the time ends with rank 1's acknowledgement of the last: a link's throughput with the transport's
// connections, not the ring's pacing. The median seconds; `*received_ok` whether rank 1 got what
// rank 0 sent.
template <typename Barrier>
double TimeP2P(narrows::deploy::ZmqTransport& t, narrows::core::CollectiveOptions& c, int& tag, int rank,
               int64_t count, int iters, std::vector<float>& data, const std::vector<float>& pattern,
               Barrier&& barrier, bool* received_ok) {
  const int64_t piece = (int64_t{1} << 20) / 4;
  const double seconds = Time(iters, data, pattern, barrier, [&] {
    c.tag = (tag += 3);
    uint8_t ack = 1;
    narrows::core::Status s;
    if (rank == 0) {
      narrows::core::SendLease lease;
      for (int64_t at = 0; at < count && s.ok(); at += piece) {
        s = t.SendBorrowed(1, c.tag, data.data() + at, static_cast<size_t>(std::min(piece, count - at)) * 4, lease);
      }
      if (s.ok()) s = t.Recv(1, c.tag + 1, &ack, 1);
      t.AwaitLent(lease);
    } else if (rank == 1) {
      for (int64_t at = 0; at < count && s.ok(); at += piece) {
        s = t.Recv(0, c.tag, data.data() + at, static_cast<size_t>(std::min(piece, count - at)) * 4);
      }
      if (s.ok()) s = t.Send(0, c.tag + 1, &ack, 1);
    }
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return s.ok();
  });
  std::vector<float> sent(data.size());
  Fill(sent, 0);
  for (size_t i = 0; rank == 1 && i < data.size(); i += 4099) *received_ok = *received_ok && data[i] == sent[i];
  return seconds;
}

// narrows over deploy::ZmqTransport as `impl` names it: the ring (core::AllReduceSum), or with
// p2p-, rank 0 to rank 1. False where this process cannot take part (no key, no connection);
// else `*seconds` is the median and `*ok` says whether the check sum came out right.
bool OneNarrows(const std::string& impl, int rank, int n, int64_t count, int iters, const std::string& rendezvous,
                const std::string& out, std::vector<float>& data, const std::vector<float>& pattern, double* seconds,
                bool* ok) {
  narrows::deploy::ZmqOptions o = NarrowsOptions(impl, rank, n, rendezvous);
  if (o.curve) {
    auto keys = narrows::deploy::ReadKeyFile(out + ".key");
    if (!keys.ok()) return false;
    o.keys = *keys;
  }
  auto t = narrows::deploy::ZmqTransport::Connect(o);
  if (!t.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str());
    return false;
  }
  narrows::core::CollectiveOptions c;
  c.pipeline_bytes = impl.find("whole") != std::string::npos ? 0 : int64_t{1} << 20;
  if (const char* ahead = std::getenv("BENCH_SEND_AHEAD")) c.send_ahead_bytes = std::atoll(ahead);  // bytes
  for (int r = 0; r < n; ++r) c.group.push_back(r);
  int tag = 100;
  auto barrier = [&] {
    float one = 1;
    c.tag = (tag += 3);
    return narrows::core::AllReduceSum(**t, &one, 1, c).ok();
  };
  bool received_ok = true;
  if (impl.rfind("p2p", 0) == 0) {
    *seconds = TimeP2P(**t, c, tag, rank, count, iters, data, pattern, barrier, &received_ok);
  } else {
    *seconds = Time(iters, data, pattern, barrier, [&] {
      c.tag = (tag += 3);
      const narrows::core::Status s = narrows::core::AllReduceSum(**t, data.data(), count, c);
      if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      return s.ok();
    });
  }
  Fill(data, rank);
  c.tag = (tag += 3);
  narrows::core::Status s = narrows::core::AllReduceSum(**t, data.data(), count, c);
  *ok = s.ok() && Correct(data, n) && received_ok;
  // Everyone has finished before anyone leaves.
  c.tag = (tag += 3);
  float one = 1;
  if (*ok) s = narrows::core::AllReduceSum(**t, &one, 1, c);
  if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
  *ok = *ok && s.ok();
  if (std::getenv("BULK_COUNTS") && o.bulk_streams > 0) {
    const auto b = (*t)->bulk_counts();
    std::fprintf(stderr, "rank %d %s: %lld into the receiver's buffer, %lld switched to it, %lld into its own\n", rank,
                 impl.c_str(), static_cast<long long>(b.into_receiver), static_cast<long long>(b.switched),
                 static_cast<long long>(b.into_own));
  }
  return true;
}

int One(const std::string& impl, int rank, int n, int64_t count, int iters, const std::string& rendezvous,
        const std::string& out) {
  std::vector<float> data(static_cast<size_t>(count)), pattern(static_cast<size_t>(count));
  Fill(pattern, rank);
  double seconds = -1;
  bool ok = true;
  if (impl.rfind("gloo", 0) == 0) {
    seconds = OneGloo(impl, rank, n, count, iters, rendezvous, data, pattern, &ok);
  } else if (!OneNarrows(impl, rank, n, count, iters, rendezvous, out, data, pattern, &seconds, &ok)) {
    return 1;
  }
  if (!ok) {
    std::fprintf(stderr, "rank %d: %s gave a wrong sum\n", rank, impl.c_str());
    return 1;
  }
  if (rank == 0) std::ofstream(out) << seconds << "\n";
  return 0;
}

// Starts n processes of this program for one case; rank 0's median seconds, or -1.
double Case(const std::string& self, const std::string& impl, int n, int64_t count, int iters, int port) {
  const auto dir = std::filesystem::temp_directory_path() / ("narrows-allreduce-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "result").string();
  if (impl.find("curve") != std::string::npos && !narrows::deploy::WriteNewKeyFile(out + ".key").ok()) return -1;
  const std::string rendezvous = impl.rfind("gloo", 0) == 0 ? (dir / "store").string() : "127.0.0.1:" + std::to_string(port);
  if (impl.rfind("gloo", 0) == 0) std::filesystem::create_directories(rendezvous);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {self, "one", impl, std::to_string(r), std::to_string(n), std::to_string(count),
                                     std::to_string(iters), rendezvous, out};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    if (::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double seconds = -1;
  if (ok) std::ifstream(out) >> seconds;
  std::filesystem::remove_all(dir);
  return seconds;
}

// ITERS and ROUNDS are whole numbers of at least 1; anything else (`--help` included) is refused
// before a process starts. `text` null: `fallback`.
int Positive(const char* what, const char* text, int fallback) {
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 100000) {
    std::fprintf(stderr,
                 "bench_allreduce: %s '%s': expected a whole number from 1 to 100000\n"
                 "usage: bench_allreduce [ITERS]   (environment: ROUNDS, CASE=RANKSxMB, IMPLS=a,b)\n",
                 what, text);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// The implementations a case runs: all, or those IMPLS names and Gloo's two.
std::vector<std::string> Impls() {
  std::vector<std::string> impls = {"gloo-ring", "gloo-ring-chunked", "narrows", "narrows-bulk", "narrows-bulk4",
                                    "narrows-whole", "narrows-curve", "narrows-curve-bulk"};
  if (const char* only = std::getenv("IMPLS")) {  // a comma-separated subset, Gloo's two always kept
    const std::string keep = std::string(",") + only + ",gloo-ring,gloo-ring-chunked,";
    impls.erase(std::remove_if(impls.begin(), impls.end(),
                               [&](const std::string& i) { return keep.find("," + i + ",") == std::string::npos; }),
                impls.end());
  }
  return impls;
}

// One case, n ranks and `mb` MB: its rounds, then a line per implementation; `below` notes each
// plain-TCP transport slower than Gloo's best (or failed).
void RunCase(const std::string& self, int n, int64_t mb, int iters, int n_rounds, std::map<std::string, bool>& below) {
  const int64_t count = mb * 1000 * 1000 / 4;
  const double bytes = static_cast<double>(count) * 4;
  // Rounds of every implementation, in turn forwards and backwards, so that all of them meet
  // the machine's drift alike; each one's figure is the median over the rounds.
  const std::vector<std::string> impls = Impls();
  std::map<std::string, std::vector<double>> rounds;
  for (int r = 0; r < n_rounds; ++r) {
    for (size_t i = 0; i < impls.size(); ++i) {
      const std::string& impl = impls[r % 2 == 0 ? i : impls.size() - 1 - i];
      rounds[impl].push_back(Case(self, impl, n, count, iters, narrows::deploy::FreeLoopbackPort()));
    }
  }
  double best_gloo = 1e30;
  for (const std::string& impl : impls) {
    std::vector<double> times;  // the rounds that did not fail
    for (double t : rounds[impl]) {
      if (t > 0) times.push_back(t);
    }
    std::sort(times.begin(), times.end());
    const double t = times.empty() ? -1 : times[times.size() / 2];
    if (t <= 0) {
      std::printf("%-6d %-8s %-15s %12s\n", n, (std::to_string(mb) + " MB").c_str(), impl.c_str(), "failed");
      below[impl] = true;
      continue;
    }
    const double busbw = bytes / t * 2.0 * (n - 1) / n / 1e9;
    if (impl.rfind("gloo", 0) == 0) best_gloo = std::min(best_gloo, t);
    char ratio[32] = "";
    if (impl.rfind("narrows", 0) == 0) {
      std::snprintf(ratio, sizeof ratio, "%.2fx", best_gloo / t);
      below[impl] = below[impl] || t > best_gloo;
    }
    std::printf("%-6d %-8s %-15s %12.2f %14.2f %14s\n", n, (std::to_string(mb) + " MB").c_str(), impl.c_str(),
                t * 1e3, busbw, ratio);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 9 && std::string(argv[1]) == "one") {
    return One(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoll(argv[5]), std::atoi(argv[6]), argv[7], argv[8]);
  }
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  if (argc > 2) {
    std::fprintf(stderr, "bench_allreduce: one argument expected (ITERS), %d given\n", argc - 1);
    return 2;
  }
  const int iters = Positive("ITERS", argc > 1 ? argv[1] : nullptr, 10);
  const int n_rounds = Positive("ROUNDS", std::getenv("ROUNDS"), 3);
  const char* only_case = std::getenv("CASE");  // "RANKSxMB", e.g. 4x64: that case alone
  if (only_case && !std::set<std::string>{"2x4", "2x64", "4x4", "4x64"}.count(only_case)) {
    std::fprintf(stderr, "bench_allreduce: CASE=%s: expected one of 2x4, 2x64, 4x4, 4x64\n", only_case);
    return 2;
  }
  std::printf("ring all-reduce of float32 over loopback TCP, processes on this machine; median over %d rounds "
              "of the median of %d\n", n_rounds, iters);
  std::printf("%-6s %-8s %-15s %12s %14s %14s\n", "ranks", "size", "impl", "time (ms)", "busbw (GB/s)", "vs best gloo");
  std::map<std::string, bool> below;  // per plain-TCP transport: slower than Gloo's best in some case
  for (int n : {2, 4}) {
    for (int64_t mb : {4, 64}) {
      if (only_case && std::to_string(n) + "x" + std::to_string(mb) != only_case) continue;
      RunCase(self, n, mb, iters, n_rounds, below);
    }
  }
  for (const char* impl : {"narrows", "narrows-bulk"}) {  // plain TCP over ZeroMQ, and over the bulk plane
    if (below.count(impl)) {
      std::printf("target: %s at least Gloo's bandwidth in every case: %s\n", impl, below[impl] ? "NOT met" : "met");
    }
  }
  return 0;
}
