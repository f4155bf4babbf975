// What the ZeroMQ transport's tests share: options for a rank on loopback, a world connected on
// threads, a raw TCP connection as a rogue peer makes one, and tests/deploy/zmq_peer spawned as a
// second process.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "deploy/addresses.h"
#include "deploy/zmq_transport.h"

namespace narrows::deploy {

inline ZmqOptions Options(int rank, int world, int port) {
  ZmqOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master = "127.0.0.1:" + std::to_string(port);
  o.bind_host = "127.0.0.1";
  o.heartbeat_s = 0.05;
  o.timeout_s = 0.5;
  o.connect_timeout_s = 10;
  o.log = [](const std::string&) {};
  return o;
}

// A raw TCP connection to a loopback endpoint ("tcp://127.0.0.1:PORT"), as a rogue peer makes
// one to a bulk plane; -1 if it fails.
inline int ConnectRaw(const std::string& endpoint) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(PortOf(endpoint)));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Connects ranks 0..n-1 of one world on threads; all or nothing.
inline std::vector<std::unique_ptr<ZmqTransport>> ConnectAll(std::vector<ZmqOptions> opts) {
  std::vector<std::unique_ptr<ZmqTransport>> out(opts.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < opts.size(); ++r) {
    threads.emplace_back([&, r] {
      auto t = ZmqTransport::Connect(opts[r]);
      if (t.ok()) out[r] = std::move(*t);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Ranks 0 and 1 of a world of two on loopback, their data over `streams` bulk connections a peer.
inline std::vector<std::unique_ptr<ZmqTransport>> ConnectPair(int streams) {
  const int port = deploy::FreeLoopbackPort();
  std::vector<ZmqOptions> opts = {Options(0, 2, port), Options(1, 2, port)};
  opts[0].bulk_streams = opts[1].bulk_streams = streams;
  return ConnectAll(opts);
}

// Starts tests/deploy/zmq_peer as rank 1 in `role` against the master on `port`; returns its pid.
// A process of its own, spawned rather than forked: a fork taken while another thread holds one of
// libzmq's global locks (context creation takes one) leaves the child deadlocked.
inline pid_t SpawnPeer(int port, const char* role) {
  const std::string port_s = std::to_string(port);
  char* argv[] = {const_cast<char*>(NARROWS_ZMQ_PEER), const_cast<char*>(port_s.c_str()), const_cast<char*>(role),
                  nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, NARROWS_ZMQ_PEER, nullptr, nullptr, argv, environ) != 0) return -1;
  return pid;
}

// Owns a spawned peer: a test that fails half-way still kills and reaps it, so that no stopped or
// waiting child keeps the test's output open after the binary exits.
class PeerProcess {
 public:
  PeerProcess(int port, const char* role) : pid_(SpawnPeer(port, role)) {}
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  // Waits for the peer to end on its own; returns waitpid's status.
  int Wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

}  // namespace narrows::deploy
