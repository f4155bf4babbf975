// Addresses of a run's processes: "host:port" as a user writes it (IPv6 hosts in brackets), the
// tcp:// endpoints ZeroMQ binds and connects, and a free port for a rendezvous on one machine.
#pragma once

#include <string>
#include <utility>

#include "core/status.h"

namespace narrows::deploy {

// Splits "host:port" (IPv6 hosts in brackets, which are removed); the port in 1..65535.
core::Result<std::pair<std::string, int>> SplitHostPort(const std::string& s);
// "tcp://host:port", with an IPv6 host in brackets.
std::string TcpEndpoint(const std::string& host, int port);
// The port of a bound endpoint ("tcp://0.0.0.0:41234" -> 41234); -1 if it has none.
int PortOf(const std::string& endpoint);
// A TCP port on 127.0.0.1 that is free now (for a rendezvous on one machine), chosen at random below
// the kernel's ephemeral range where there is room (10000 up to it), so that no outgoing connection
// can take it before the caller binds it; from the ephemeral range otherwise.
int FreeLoopbackPort();
// The first port of the kernel's ephemeral range (ip_local_port_range); -1 where it cannot be read.
int EphemeralPortsFrom();

}  // namespace narrows::deploy
