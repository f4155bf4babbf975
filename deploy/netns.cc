#include "deploy/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace narrows::deploy {
namespace {

core::Status Errno(const std::string& what) {
  return core::Status::Internal(what + ": " + std::strerror(errno));
}

// Runs `fn` on a new thread and returns its status (namespace changes stay on that thread).
core::Status OnThread(const std::function<core::Status()>& fn) {
  core::Status out;
  std::thread t([&] { out = fn(); });
  t.join();
  return out;
}

core::Status SetFlags(int sock, const std::string& name, short add) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(sock, SIOCGIFFLAGS, &ifr) < 0) return Errno("SIOCGIFFLAGS " + name);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | add);
  if (::ioctl(sock, SIOCSIFFLAGS, &ifr) < 0) return Errno("SIOCSIFFLAGS " + name);
  return core::Status::Ok();
}

core::Status SetAddress(int sock, const std::string& name, unsigned long request, uint32_t address) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(address);
  std::memcpy(&ifr.ifr_addr, &sin, sizeof sin);
  if (::ioctl(sock, request, &ifr) < 0) return Errno("setting an address of " + name);
  return core::Status::Ok();
}

}  // namespace

core::Status CheckNetworkPrivileges() {
  if (::access("/dev/net/tun", R_OK | W_OK) != 0) {
    return core::Status::Aborted("no /dev/net/tun to open (TUN devices need it and root)");
  }
  return OnThread([]() -> core::Status {
    if (::unshare(CLONE_NEWNET) != 0) {
      return core::Status::Aborted(std::string("cannot make a network namespace (") + std::strerror(errno) +
                                              "): run as root, or with CAP_NET_ADMIN");
    }
    return core::Status::Ok();
  });
}

NetNamespace& NetNamespace::operator=(NetNamespace&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

NetNamespace::~NetNamespace() {
  if (fd_ >= 0) ::close(fd_);
}

core::Result<NetNamespace> NetNamespace::Create() {
  int fd = -1;
  core::Status s = OnThread([&]() -> core::Status {
    if (::unshare(CLONE_NEWNET) != 0) return Errno("unshare(CLONE_NEWNET)");
    fd = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("opening the new namespace");
    const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return Errno("socket");
    core::Status up = SetFlags(sock, "lo", IFF_UP);
    ::close(sock);
    return up;
  });
  if (!s.ok()) {
    if (fd >= 0) ::close(fd);
    return s;
  }
  return NetNamespace(fd);
}

core::Status NetNamespace::Run(const std::function<core::Status()>& fn) const {
  return OnThread([&]() -> core::Status {
    if (::setns(fd_, CLONE_NEWNET) != 0) return Errno("setns");
    return fn();
  });
}

core::Status NetNamespace::Enter() const {
  if (::setns(fd_, CLONE_NEWNET) != 0) return Errno("setns");
  return core::Status::Ok();
}

core::Status NetNamespace::Publish(const std::string& name) const {
  ::mkdir("/run/netns", 0755);
  const std::string path = "/run/netns/" + name;
  const int f = ::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (f < 0) return Errno(path);
  ::close(f);
  const std::string self = "/proc/self/fd/" + std::to_string(fd_);
  if (::mount(self.c_str(), path.c_str(), "none", MS_BIND, nullptr) != 0) {
    core::Status s = Errno("bind-mounting the namespace on " + path);
    ::unlink(path.c_str());
    return s;
  }
  return core::Status::Ok();
}

void NetNamespace::Unpublish(const std::string& name) {
  const std::string path = "/run/netns/" + name;
  ::umount2(path.c_str(), MNT_DETACH);
  ::unlink(path.c_str());
}

core::Status SetSysctl(const NetNamespace& ns, const std::string& key, const std::string& value) {
  return ns.Run([&]() -> core::Status {
    const std::string path = "/proc/sys/" + key;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Errno(path);
    const ssize_t n = ::write(fd, value.data(), value.size());
    const int err = errno;
    ::close(fd);
    errno = err;
    if (n != static_cast<ssize_t>(value.size())) return Errno(path + " = " + value);
    return core::Status::Ok();
  });
}

namespace {

// Reads the "PREFIX: name name ..." / "PREFIX: value value ..." line pairs of a /proc/net file.
core::Status ReadCounterLines(const std::string& path, const std::string& prefix, std::map<std::string, int64_t>& out) {
  std::ifstream in(path);
  if (!in) return Errno(path);
  std::string names, values;
  while (std::getline(in, names) && std::getline(in, values)) {
    if (names.rfind(prefix + ":", 0) != 0 || values.rfind(prefix + ":", 0) != 0) continue;
    std::istringstream n(names.substr(prefix.size() + 1)), v(values.substr(prefix.size() + 1));
    std::string name;
    int64_t value = 0;
    while (n >> name && v >> value) out[name] = value;
  }
  return core::Status::Ok();
}

}  // namespace

core::Result<std::map<std::string, int64_t>> TcpCounters(const NetNamespace& ns) {
  std::map<std::string, int64_t> out;
  // /proc/net is the process's namespace (its first thread's); /proc/thread-self/net is this thread's.
  NARROWS_RETURN_IF_ERROR(ns.Run([&]() -> core::Status {
    NARROWS_RETURN_IF_ERROR(ReadCounterLines("/proc/thread-self/net/snmp", "Tcp", out));
    return ReadCounterLines("/proc/thread-self/net/netstat", "TcpExt", out);
  }));
  return out;
}

uint32_t Ipv4(int a, int b, int c, int d) {
  return (static_cast<uint32_t>(a) << 24) | (static_cast<uint32_t>(b) << 16) | (static_cast<uint32_t>(c) << 8) |
         static_cast<uint32_t>(d);
}

std::string Ipv4Text(uint32_t address) {
  return std::to_string(address >> 24) + "." + std::to_string((address >> 16) & 255) + "." +
         std::to_string((address >> 8) & 255) + "." + std::to_string(address & 255);
}

core::Result<TunDevice> CreateTun(const NetNamespace& ns, const std::string& name, uint32_t address, int prefix,
                                  int mtu) {
  if (name.empty() || name.size() >= IFNAMSIZ) return core::Status::InvalidArgument("bad TUN name '" + name + "'");
  if (prefix < 1 || prefix > 30) return core::Status::InvalidArgument("TUN prefix must be 1-30");
  TunDevice dev;
  dev.name = name;
  dev.address = address;
  core::Status s = ns.Run([&]() -> core::Status {
    dev.fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (dev.fd < 0) return Errno("/dev/net/tun");
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
    if (::ioctl(dev.fd, TUNSETIFF, &ifr) < 0) return Errno("TUNSETIFF " + name);
    const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return Errno("socket");
    core::Status st = SetAddress(sock, name, SIOCSIFADDR, address);
    if (st.ok()) st = SetAddress(sock, name, SIOCSIFNETMASK, prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix));
    if (st.ok()) {
      ifreq m{};
      std::strncpy(m.ifr_name, name.c_str(), IFNAMSIZ - 1);
      m.ifr_mtu = mtu;
      if (::ioctl(sock, SIOCSIFMTU, &m) < 0) st = Errno("SIOCSIFMTU " + name);
    }
    if (st.ok()) {
      // A long queue between the namespace and the emulator: packets wait for the emulator to
      // read them rather than being dropped there (the emulated links do the dropping).
      ifreq q{};
      std::strncpy(q.ifr_name, name.c_str(), IFNAMSIZ - 1);
      q.ifr_qlen = 10000;
      if (::ioctl(sock, SIOCSIFTXQLEN, &q) < 0) st = Errno("SIOCSIFTXQLEN " + name);
    }
    if (st.ok()) st = SetFlags(sock, name, IFF_UP | IFF_RUNNING);
    ::close(sock);
    return st;
  });
  if (!s.ok()) {
    if (dev.fd >= 0) ::close(dev.fd);
    return s;
  }
  return dev;
}

}  // namespace narrows::deploy
