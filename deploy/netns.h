// Network namespaces and TUN devices: worker processes on an emulated network on one machine (the
// link emulator, deploy/link_emulator.h). Linux only; making them needs CAP_NET_ADMIN (root).
//
// A namespace is held by an open descriptor and disappears with its last holder (this object, a
// process inside it, a socket or device in it). Code runs inside one on a thread of its own
// (Run): a socket or device opened there stays in the namespace, whichever thread uses it later.
// Child processes enter one before exec (Enter). No `ip` command is needed: everything is made
// with unshare, setns and ioctls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/status.h"

namespace narrows::deploy {

// Ok if this process can make network namespaces and TUN devices; otherwise why not (for a clear
// error, and for tests to skip with the reason).
core::Status CheckNetworkPrivileges();

class NetNamespace {
 public:
  // A new network namespace with its loopback up.
  static core::Result<NetNamespace> Create();
  NetNamespace(NetNamespace&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  NetNamespace& operator=(NetNamespace&& other) noexcept;
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;
  ~NetNamespace();

  int fd() const { return fd_; }
  // Runs `fn` on a new thread inside the namespace and returns its status.
  core::Status Run(const std::function<core::Status()>& fn) const;
  // Moves the calling thread into the namespace (a child process, before exec).
  core::Status Enter() const;
  // Makes it visible to `ip netns exec NAME` (/run/netns/NAME) until Unpublish or the process ends.
  core::Status Publish(const std::string& name) const;
  static void Unpublish(const std::string& name);

 private:
  explicit NetNamespace(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Writes `value` to /proc/sys/`key` (key with slashes, e.g. net/ipv4/tcp_congestion_control) inside
// `ns`: the namespace's own setting.
core::Status SetSysctl(const NetNamespace& ns, const std::string& key, const std::string& value);

// The kernel's TCP counters inside `ns`, by name: /proc/net/snmp's Tcp line (OutSegs, RetransSegs,
// ...) and /proc/net/netstat's TcpExt line (TCPTimeouts, TCPLossProbes, TCPSackRecovery, ...), as
// `nstat -a` shows them: what every connection of the namespace did since it was made.
core::Result<std::map<std::string, int64_t>> TcpCounters(const NetNamespace& ns);

// An IPv4 address in host order, and its dotted form.
uint32_t Ipv4(int a, int b, int c, int d);
std::string Ipv4Text(uint32_t address);

// A TUN device (IP packets, no header) made inside `ns` as `name`, with `address`/`prefix` and
// `mtu`, up: the namespace reaches the prefix's subnet through it. Reading the descriptor gives
// what the namespace sends there; writing a packet to it delivers the packet into the namespace.
// The descriptor is non-blocking.
struct TunDevice {
  int fd = -1;
  std::string name;
  uint32_t address = 0;
};
core::Result<TunDevice> CreateTun(const NetNamespace& ns, const std::string& name, uint32_t address, int prefix,
                                  int mtu);

}  // namespace narrows::deploy
