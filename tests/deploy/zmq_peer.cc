// A rank-1 peer for ZmqTransportTest, run as its own process (posix_spawn, not fork: forking a
// process whose other threads may hold libzmq's global locks can deadlock the child).
//   zmq_peer PORT first    registers, sends tags 1 and 2 to rank 0, then kills itself (SIGKILL)
//   zmq_peer PORT second   registers, answers tag 4 with 43 when sent 42, waits for tag 5
//   zmq_peer PORT big      registers with one bulk connection, sends 256 MB of 1.0f as tag 7,
//                          waits for tag 5
// Exit status: 0 done, 2 bad arguments, 3 no rendezvous, 4 wrong message, 5 send failed.
// A watchdog ends it after 60 s so that a hang cannot outlive the test.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "deploy/zmq_transport.h"

int main(int argc, char** argv) {
  using narrows::deploy::ZmqOptions;
  using narrows::deploy::ZmqTransport;
  if (argc != 3) return 2;
  const std::string role = argv[2];
  if (role != "first" && role != "second" && role != "big") return 2;
  ::alarm(60);
  ZmqOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.master = std::string("127.0.0.1:") + argv[1];
  o.bind_host = "127.0.0.1";
  o.heartbeat_s = 0.05;
  o.timeout_s = 0.5;
  o.connect_timeout_s = 10;
  o.log = [](const std::string&) {};
  if (role == "big") {
    o.bulk_streams = 1;
    // Its 256 MB take a while to fill and send on a loaded machine: rank 0, busy zeroing its own
    // buffer, must not be taken for dead meanwhile (the message would never be sent).
    o.timeout_s = 30.0;
  }
  auto t = ZmqTransport::Connect(o);
  if (!t.ok()) return 3;
  if (role == "big") {
    std::vector<float> payload(64 << 20, 1.0f);
    if (!(*t)->Send(0, 7, payload.data(), payload.size() * 4).ok()) std::_Exit(5);
    int32_t done = 0;
    (void)(*t)->Recv(0, 5, &done, 4, 50.0);
    std::_Exit(0);
  }
  if (role == "first") {
    int32_t v = 1;
    (void)(*t)->Send(0, 1, &v, 4);
    (void)(*t)->Send(0, 2, &v, 4);  // never read by rank 0: dies with this incarnation
    ::sleep(1);
    ::raise(SIGKILL);
  }
  int32_t w = 0;
  if (!(*t)->Recv(0, 4, &w, 4, 10.0).ok() || w != 42) std::_Exit(4);
  w = 43;
  if (!(*t)->Send(0, 4, &w, 4).ok()) std::_Exit(5);
  int32_t done = 0;
  (void)(*t)->Recv(0, 5, &done, 4, 10.0);
  std::_Exit(0);
}
