// Linux's congestion-window rules around ns-3's NewReno and CUBIC, for the packet-level model
// (sim/ns3_model.h): the rules and why each is needed are in sim/ns3/linux_window.cc.
#pragma once

#include <ns3/ptr.h>

namespace ns3 {
class TcpCongestionOps;
}

namespace narrows::sim {

// `inner` (NewReno or CUBIC; not BBR, which controls its window itself) under Linux's window
// rules: the congestion control to give a socket in its place.
ns3::Ptr<ns3::TcpCongestionOps> LinuxWindowAround(ns3::Ptr<ns3::TcpCongestionOps> inner);

}  // namespace narrows::sim
