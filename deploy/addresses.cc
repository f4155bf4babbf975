#include "deploy/addresses.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>

namespace narrows::deploy {

core::Result<std::pair<std::string, int>> SplitHostPort(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return core::Status::InvalidArgument("expected host:port, got '" + s + "'");
  }
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) {
    return core::Status::InvalidArgument("expected a port in 1..65535 in '" + s + "'");
  }
  return std::make_pair(host, static_cast<int>(port));
}

std::string TcpEndpoint(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int PortOf(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(endpoint.c_str() + colon + 1);
}

int EphemeralPortsFrom() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low && low > 0 ? low : -1;
}

namespace {

// Whether a TCP socket can bind 127.0.0.1:`port` now (0: any port); the port it got, or -1.
int BindLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof a;
  int got = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    got = ntohs(a.sin_port);
  }
  ::close(fd);
  return got;
}

}  // namespace

int FreeLoopbackPort() {
  // Below the kernel's ephemeral range, which bind(0) and every outgoing connection draw from: a
  // port from that range can be taken by any connection between this check and the caller's bind
  // (it happened, "Address already in use"), one below it only by a process that names it.
  const int ephemeral = EphemeralPortsFrom();
  if (ephemeral > 10'000 + 1'000) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(10'000, ephemeral - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = BindLoopback(pick(rng));
      if (port > 0) return port;
    }
  }
  const int port = BindLoopback(0);
  return port > 0 ? port : 29500;
}

}  // namespace narrows::deploy
