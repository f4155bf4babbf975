// The transport contract: what one Transport promises, every Transport keeps. Parameterised over
// the in-process loopback and the emulator over the analytic and the packet-level ns-3 model.
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>

#include <unistd.h>

#include "core/collectives.h"
#include "core/loopback_transport.h"
#include "deploy/zmq_transport.h"
#include "emu/engine.h"
#include "sim/analytic_model.h"
#include "sim/ns3_model.h"

namespace narrows::core {
namespace {

// Runs body(rank, transport) on every rank of a fresh world of `n` ranks.
using Body = std::function<void(int, Transport&)>;
struct World {
  std::string name;
  std::function<void(int n, const Body&)> run;
};

World Loopback() {
  return {"loopback", [](int n, const Body& body) {
            LoopbackHub hub(n);
            std::vector<std::thread> threads;
            for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(r, hub.endpoint(r)); });
            for (auto& t : threads) t.join();
          }};
}

World Emulated() {
  return {"emulated", [](int n, const Body& body) {
            emu::Engine engine(n, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(sim::UniformLinks(n, 1e9, 0.001))));
            engine.Run([&](int r) { body(r, engine.endpoint(r)); });
          }};
}

World EmulatedNs3() {
  return {"emulated_ns3", [](int n, const Body& body) {
            emu::Engine engine(n, std::make_unique<sim::Ns3Model>(sim::Topology::Star(sim::UniformLinks(n, 1e9, 0.001)), sim::Ns3Options{}));
            engine.Run([&](int r) { body(r, engine.endpoint(r)); });
          }};
}


// ZeroMQ over loopback TCP: one process, one thread and one transport per rank.
// bulk_streams > 0: data over the bulk plane's raw TCP connections (ZeroMQ keeps membership).
World ZeroMq(bool curve, int bulk_streams = 0) {
  const std::string name = std::string(curve ? "zeromq_curve" : "zeromq") +
                           (bulk_streams ? "_bulk" + std::to_string(bulk_streams) : "");
  return {name, [curve, bulk_streams](int n, const Body& body) {
            deploy::ZmqOptions base;
            base.world_size = n;
            base.bulk_streams = bulk_streams;
            base.bind_host = "127.0.0.1";
            base.connect_timeout_s = 20;
            if (curve) {
              base.curve = true;
              base.keys = *deploy::GenerateCurveKeys();
            }
            std::vector<std::unique_ptr<deploy::ZmqTransport>> ts(static_cast<size_t>(n));
            std::vector<std::thread> threads;
            // A free port can be taken by another process (tests run in parallel) before rank 0
            // binds it: then every rank tries again on a new one.
            std::vector<core::Status> connected(static_cast<size_t>(n));
            for (int attempt = 0; attempt < 3; ++attempt) {
              base.master = "127.0.0.1:" + std::to_string(deploy::FreeLoopbackPort());
              for (int r = 0; r < n; ++r) {
                threads.emplace_back([&, r] {
                  deploy::ZmqOptions o = base;
                  o.rank = r;
                  auto t = deploy::ZmqTransport::Connect(o);
                  connected[static_cast<size_t>(r)] = t.status();
                  if (t.ok()) ts[static_cast<size_t>(r)] = std::move(*t);
                });
              }
              for (auto& t : threads) t.join();
              threads.clear();
              if (connected[0].ok() || connected[0].message().find("Address already in use") == std::string::npos) break;
              for (auto& t : ts) t.reset();
            }
            for (int r = 0; r < n; ++r) {
              ASSERT_TRUE(connected[static_cast<size_t>(r)].ok()) << connected[static_cast<size_t>(r)].ToString();
            }
            for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(r, *ts[static_cast<size_t>(r)]); });
            for (auto& t : threads) t.join();
          }};
}

class TransportContractTest : public ::testing::TestWithParam<World> {};

TEST_P(TransportContractTest, MessagesArriveInOrderWithTheirBytes) {
  GetParam().run(2, [](int rank, Transport& t) {
    if (rank == 0) {
      for (int i = 0; i < 5; ++i) {
        std::vector<int32_t> v(100, i);
        ASSERT_TRUE(t.Send(1, 7, v.data(), v.size() * 4).ok());
      }
    } else {
      for (int i = 0; i < 5; ++i) {
        std::vector<int32_t> v(100, -1);
        ASSERT_TRUE(t.Recv(0, 7, v.data(), v.size() * 4).ok());
        EXPECT_EQ(v[0], i);
        EXPECT_EQ(v[99], i);
      }
      EXPECT_EQ(t.stats().bytes_received, 2000);
    }
  });
}

TEST_P(TransportContractTest, TagsAreSeparateQueues) {
  GetParam().run(2, [](int rank, Transport& t) {
    int32_t a = 1, b = 2;
    if (rank == 0) {
      ASSERT_TRUE(t.Send(1, 1, &a, 4).ok());
      ASSERT_TRUE(t.Send(1, 2, &b, 4).ok());
    } else {
      int32_t x = 0;
      ASSERT_TRUE(t.Recv(0, 2, &x, 4).ok());
      EXPECT_EQ(x, 2);
      ASSERT_TRUE(t.Recv(0, 1, &x, 4).ok());
      EXPECT_EQ(x, 1);
    }
  });
}

TEST_P(TransportContractTest, WrongSizeIsRejectedNotWritten) {
  GetParam().run(2, [](int rank, Transport& t) {
    std::vector<uint8_t> big(64, 0xAB);
    if (rank == 0) {
      ASSERT_TRUE(t.Send(1, 3, big.data(), big.size()).ok());
    } else {
      std::vector<uint8_t> small(16, 0);
      const Status s = t.Recv(0, 3, small.data(), small.size());
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(small[0], 0);
    }
  });
}

// A receive whose bytes are read where they lie (the ring's reduce), with Recv's size check.
TEST_P(TransportContractTest, RecvInPlaceHandsOverTheBytes) {
  GetParam().run(2, [](int rank, Transport& t) {
    const std::vector<float> sent = {1.5f, -2.0f, 3.25f};
    if (rank == 0) {
      ASSERT_TRUE(t.Send(1, 4, sent.data(), 12).ok());
      ASSERT_TRUE(t.Send(1, 4, sent.data(), 8).ok());
      return;
    }
    std::vector<float> got;
    ASSERT_TRUE(t.RecvInPlace(0, 4, 12, [&](const void* p) {
      const auto* f = static_cast<const float*>(p);
      got.assign(f, f + 3);
    }).ok());
    EXPECT_EQ(got, sent);
    bool called = false;
    EXPECT_EQ(t.RecvInPlace(0, 4, 12, [&](const void*) { called = true; }).code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(called);
    EXPECT_EQ(t.stats().bytes_received, 12);
  });
}

// A borrowed send may read the sender's bytes until AwaitLent: what arrives is what the buffer held
// when it was sent, and the buffer may be overwritten (and sent again) once AwaitLent returned.
TEST_P(TransportContractTest, SendBorrowedDeliversTheBytesItWasLent) {
  GetParam().run(2, [](int rank, Transport& t) {
    const size_t count = 256 * 1024;  // 1 MiB: large enough that ZeroMQ sends it without a copy
    if (rank == 0) {
      std::vector<float> buffer(count);
      std::iota(buffer.begin(), buffer.end(), 0.0f);
      SendLease lease;
      ASSERT_TRUE(t.SendBorrowed(1, 7, buffer.data(), count * 4, lease).ok());
      ASSERT_TRUE(t.SendBorrowed(1, 7, buffer.data() + 1, 8, lease).ok());  // small: copied
      t.AwaitLent(lease);
      EXPECT_TRUE(lease.Outstanding(0).empty());
      std::fill(buffer.begin(), buffer.end(), -1.0f);
      ASSERT_TRUE(t.SendBorrowed(1, 7, buffer.data(), count * 4, lease).ok());
      t.AwaitLent(lease);
      return;
    }
    std::vector<float> got(count), pair(2);
    ASSERT_TRUE(t.Recv(0, 7, got.data(), count * 4).ok());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], static_cast<float>(i)) << i;
    ASSERT_TRUE(t.Recv(0, 7, pair.data(), 8).ok());
    EXPECT_EQ(pair, (std::vector<float>{1.0f, 2.0f}));
    ASSERT_TRUE(t.Recv(0, 7, got.data(), count * 4).ok());
    EXPECT_EQ(std::count(got.begin(), got.end(), -1.0f), static_cast<long>(count));
  });
}

// Large and small messages under one tag keep their order, whichever connection carries each; a
// receive that waits for another tag gets its message though a large one sent before it has no
// receive yet; a large message is received straight into a Recv's buffer where the transport can.
TEST_P(TransportContractTest, LargeAndSmallMessagesKeepTheirOrder) {
  GetParam().run(2, [](int rank, Transport& t) {
    const size_t large = 300 * 1024;  // floats
    auto pattern = [](size_t n, float base) {
      std::vector<float> v(n);
      std::iota(v.begin(), v.end(), base);
      return v;
    };
    if (rank == 0) {
      for (int round = 0; round < 3; ++round) {
        const auto a = pattern(large, 1.0f + round), b = pattern(3, -5.0f), c = pattern(large, 7.0f), d = pattern(large / 2, 9.0f);
        ASSERT_TRUE(t.Send(1, 5, a.data(), a.size() * 4).ok());
        ASSERT_TRUE(t.Send(1, 5, b.data(), b.size() * 4).ok());
        ASSERT_TRUE(t.Send(1, 6, c.data(), c.size() * 4).ok());
        ASSERT_TRUE(t.Send(1, 5, d.data(), d.size() * 4).ok());
      }
      return;
    }
    for (int round = 0; round < 3; ++round) {
      std::vector<float> a(large), b(3), c(large), d(large / 2);
      ASSERT_TRUE(t.Recv(0, 6, c.data(), c.size() * 4).ok());  // sent after a and b, received first
      EXPECT_EQ(c, pattern(large, 7.0f));
      ASSERT_TRUE(t.Recv(0, 5, a.data(), a.size() * 4).ok());
      EXPECT_EQ(a, pattern(large, 1.0f + round));
      ASSERT_TRUE(t.Recv(0, 5, b.data(), b.size() * 4).ok());
      EXPECT_EQ(b, pattern(3, -5.0f));
      ASSERT_TRUE(t.RecvInPlace(0, 5, d.size() * 4, [&](const void* p) { std::memcpy(d.data(), p, d.size() * 4); }).ok());
      EXPECT_EQ(d, pattern(large / 2, 9.0f));
    }
    EXPECT_EQ(t.stats().messages_received, 12);
  });
}

TEST_P(TransportContractTest, RecvTimesOut) {
  GetParam().run(2, [](int rank, Transport& t) {
    if (rank == 1) {
      int32_t x;
      const Status s = t.Recv(0, 9, &x, 4, 0.05);
      EXPECT_TRUE(s.code() == StatusCode::kTimeout || s.code() == StatusCode::kPeerUnavailable) << s.ToString();
    }
  });
}

TEST_P(TransportContractTest, InvalidDestinationIsAnError) {
  GetParam().run(2, [](int, Transport& t) {
    int32_t x = 0;
    EXPECT_EQ(t.Send(5, 0, &x, 4).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.Send(-1, 0, &x, 4).code(), StatusCode::kInvalidArgument);
    std::vector<uint8_t> out;
    EXPECT_EQ(t.RecvMessage(7, 0, &out, 0.01).status().code(), StatusCode::kInvalidArgument);
  });
}

// A server's receive: messages of any size from any source, each with its source; one from the
// rank itself (an operation started beside its worker) arrives off the network, uncounted.
TEST_P(TransportContractTest, RecvMessageFromAnySourceNamesTheSource) {
  GetParam().run(4, [](int rank, Transport& t) {
    if (rank != 0) {
      const std::vector<uint8_t> payload(static_cast<size_t>(100 * rank), static_cast<uint8_t>(rank));
      ASSERT_TRUE(t.Send(0, 11, payload.data(), payload.size()).ok());
      ASSERT_TRUE(t.Send(0, 11, payload.data(), 1).ok());  // a second, shorter one
      return;
    }
    auto server = t.Start([](Transport& s) -> Status {
      std::vector<int> first_from, second_from;
      for (int i = 0; i < 7; ++i) {
        std::vector<uint8_t> got;
        auto src = s.RecvMessage(kAnySource, 11, &got, 30.0);
        if (!src.ok()) return src.status();
        const int r = *src;
        if (r < 0 || r > 3 || got.empty() || got[0] != r) return Status::InvalidArgument("wrong source or payload");
        const bool second = std::count(first_from.begin(), first_from.end(), r) > 0;
        const size_t expected = second || r == 0 ? 1u : 100u * static_cast<size_t>(r);
        if (got.size() != expected) return Status::InvalidArgument("wrong size");
        (second ? second_from : first_from).push_back(r);  // per source, in the order sent
      }
      std::sort(first_from.begin(), first_from.end());
      std::sort(second_from.begin(), second_from.end());
      if (first_from != std::vector<int>{0, 1, 2, 3} || second_from != std::vector<int>{1, 2, 3}) {
        return Status::InvalidArgument("not every message arrived once");
      }
      return Status::Ok();
    });
    const auto before = t.stats();
    const std::vector<uint8_t> mine(1, 0);
    ASSERT_TRUE(t.Send(0, 11, mine.data(), mine.size()).ok());  // to itself: its server's endpoint
    EXPECT_EQ(t.stats().bytes_sent, before.bytes_sent);
    const Status s = server->Wait(60.0);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(t.stats().bytes_received, 3 * 1 + 100 + 200 + 300);
  });
}

TEST_P(TransportContractTest, RecvMessageFromANamedSourceAndTimeout) {
  GetParam().run(2, [](int rank, Transport& t) {
    if (rank == 1) {
      const uint8_t a[3] = {1, 2, 3};
      ASSERT_TRUE(t.Send(0, 5, a, 3).ok());
      return;
    }
    std::vector<uint8_t> got;
    auto src = t.RecvMessage(1, 5, &got, 30.0);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    EXPECT_EQ(*src, 1);
    EXPECT_EQ(got, (std::vector<uint8_t>{1, 2, 3}));
    const auto none = t.RecvMessage(kAnySource, 6, &got, 0.05);
    EXPECT_FALSE(none.ok());
  });
}

void ExpectAllReduce(const World& w, int n, int64_t count, AllReduceAlgorithm algorithm, int64_t pipeline_bytes = 0,
                     int64_t send_ahead_bytes = 0) {
  w.run(n, [&](int rank, Transport& t) {
    std::vector<float> data(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank * 1000 + i % 97);
    CollectiveOptions o;
    o.group.resize(n);
    std::iota(o.group.begin(), o.group.end(), 0);
    o.algorithm = algorithm;
    o.islands = {{0, 1}, {2, 3}};
    o.pipeline_bytes = pipeline_bytes;
    o.send_ahead_bytes = send_ahead_bytes;
    ASSERT_TRUE(AllReduceSum(t, data.data(), count, o).ok());
    const float rank_sum = 1000.0f * n * (n - 1) / 2;
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(data[i], rank_sum + n * static_cast<float>(i % 97)) << i;
    if (algorithm == AllReduceAlgorithm::kRing) {
      EXPECT_EQ(t.stats().bytes_sent, RingAllReduceBytesPerRank(count, n, rank));
    }
    if (algorithm != AllReduceAlgorithm::kRing && algorithm != AllReduceAlgorithm::kHierarchical) {
      // The encoded all-reduce's bytes, in fp32 (the star's: S from every rank to the root, (n-1) S back).
      EXPECT_EQ(t.stats().bytes_sent, EncodedAllReduceBytesPerRank(Codec(CodecSpec{}), count, 0, n, rank, algorithm));
    }
  });
}

TEST_P(TransportContractTest, RingAllReduce) {
  ExpectAllReduce(GetParam(), 4, 1003, AllReduceAlgorithm::kRing);
  ExpectAllReduce(GetParam(), 3, 2, AllReduceAlgorithm::kRing);  // fewer elements than ranks
  // Chunks of 1.2 MB: pieces lent to the transport, overwritten by the all-gather once back.
  ExpectAllReduce(GetParam(), 3, 900001, AllReduceAlgorithm::kRing);
  // In 64 KiB pieces, one ahead of each receive (as over a LAN) and 16 ahead (a long link's).
  ExpectAllReduce(GetParam(), 3, 900001, AllReduceAlgorithm::kRing, 64 << 10);
  ExpectAllReduce(GetParam(), 3, 900001, AllReduceAlgorithm::kRing, 64 << 10, 1 << 20);
}
TEST_P(TransportContractTest, StarAllReduce) { ExpectAllReduce(GetParam(), 4, 1003, AllReduceAlgorithm::kStar); }
TEST_P(TransportContractTest, TwoPhaseAllReduce) {
  ExpectAllReduce(GetParam(), 4, 1003, AllReduceAlgorithm::kTwoPhase);
  ExpectAllReduce(GetParam(), 3, 2, AllReduceAlgorithm::kTwoPhase);  // fewer elements than ranks
}
TEST_P(TransportContractTest, TreeAllReduce) {
  ExpectAllReduce(GetParam(), 4, 1003, AllReduceAlgorithm::kTree);
  ExpectAllReduce(GetParam(), 7, 1003, AllReduceAlgorithm::kTree);  // a full tree of depth 2
  ExpectAllReduce(GetParam(), 3, 2, AllReduceAlgorithm::kTree);
}
TEST_P(TransportContractTest, HierarchicalAllReduce) {
  ExpectAllReduce(GetParam(), 4, 1003, AllReduceAlgorithm::kHierarchical);
}

// The encoded all-reduce over every collective: every rank ends with the same values, the exact sum
// to within the codec's error (at most a rounding per hop of the growing partial sum and one of the
// sum: the ring's bound, the loosest), and sends the bytes the formula says; the exact tail (counts,
// votes) is summed exactly.
TEST_P(TransportContractTest, EncodedAllReduce) {
  const int n = 4;
  const int64_t count = 1003, tail = 5;
  for (const auto algorithm : {AllReduceAlgorithm::kTwoPhase, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kStar,
                               AllReduceAlgorithm::kTree, AllReduceAlgorithm::kHierarchical})
  for (const std::string format : {"int8", "bf16", "int4"}) {
    auto spec = ParseCodec(format == "bf16" ? format : "{format: " + format + ", block: 64}");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    const Codec codec(*spec);
    std::vector<std::vector<float>> results(n);
    GetParam().run(n, [&](int rank, Transport& t) {
      std::vector<float> data(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) data[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i + 101 * rank));
      for (int64_t i = count - tail; i < count; ++i) data[static_cast<size_t>(i)] = static_cast<float>(rank + 1);
      CollectiveOptions o;
      o.group = {0, 1, 2, 3};
      o.algorithm = algorithm;
      o.islands = {{0, 1}, {2, 3}};
      const auto before = t.stats().bytes_sent;
      ASSERT_TRUE(AllReduceSumEncoded(t, data.data(), count, tail, codec, o).ok());
      // Hierarchical: fp32 inside each island (to its leader and back), the codec's ring between the
      // two leaders alone.
      const int64_t island = 4 * count;
      const int64_t expected =
          algorithm != AllReduceAlgorithm::kHierarchical ? EncodedAllReduceBytesPerRank(codec, count, tail, n, rank, algorithm)
          : rank % 2 == 1 ? island
                          : island + EncodedAllReduceBytesPerRank(codec, count, tail, 2, rank / 2, AllReduceAlgorithm::kRing);
      EXPECT_EQ(t.stats().bytes_sent - before, expected);
      results[static_cast<size_t>(rank)] = data;
    });
    // |x| <= 1 per rank: each decoded contribution is off by at most half a step of its block's
    // scale (int: amax / qmax / 2; bf16: 2^-8 relative); the sum's re-encoding adds one such step of 4.
    const double step = format == "int8" ? 1.0 / 127 : format == "int4" ? 1.0 / 7 : 1.0 / 128;
    for (int64_t i = 0; i < count - tail; ++i) {
      double exact = 0.0;
      for (int r = 0; r < n; ++r) exact += std::sin(0.37f * static_cast<float>(i + 101 * r));
      const double bound = algorithm == AllReduceAlgorithm::kTwoPhase ? n * step / 2 + n * step / 2
                                                                      : (n * (n - 1) / 2 + n) * step / 2;
      EXPECT_NEAR(results[0][static_cast<size_t>(i)], exact, bound + 1e-5) << format << " " << i;
      for (int r = 1; r < n; ++r) ASSERT_EQ(results[static_cast<size_t>(r)][static_cast<size_t>(i)], results[0][static_cast<size_t>(i)]);
    }
    for (int64_t i = count - tail; i < count; ++i) EXPECT_EQ(results[3][static_cast<size_t>(i)], 10.0f);
  }
}

TEST_P(TransportContractTest, BroadcastFromRoot) {
  GetParam().run(3, [](int rank, Transport& t) {
    std::vector<double> v(10, rank == 2 ? 3.5 : 0.0);
    CollectiveOptions o;
    o.group = {0, 1, 2};
    o.root = 2;
    ASSERT_TRUE(Broadcast(t, v.data(), v.size() * sizeof(double), o).ok());
    EXPECT_EQ(v[9], 3.5);
  });
}

TEST_P(TransportContractTest, AsyncAllReduceCompletesBesideTheCaller) {
  GetParam().run(3, [](int rank, Transport& t) {
    std::vector<float> a(5000, static_cast<float>(rank)), b(5000, 1.0f);
    CollectiveOptions first;
    first.group = {0, 1, 2};
    CollectiveOptions second = first;
    second.tag = 300;  // concurrent collectives need distinct tags
    auto work = AllReduceSumAsync(t, a.data(), 5000, first);
    ASSERT_TRUE(AllReduceSum(t, b.data(), 5000, second).ok());  // meanwhile, on the main endpoint
    ASSERT_TRUE(work->Wait().ok());
    EXPECT_TRUE(work->Done());
    EXPECT_EQ(a[4999], 3.0f);
    EXPECT_EQ(b[0], 3.0f);
    EXPECT_EQ(t.stats().bytes_sent, 2 * RingAllReduceBytesPerRank(5000, 3, rank));
  });
}

INSTANTIATE_TEST_SUITE_P(AllTransports, TransportContractTest, ::testing::Values(Loopback(), Emulated(), EmulatedNs3(), ZeroMq(false), ZeroMq(true),
                                                                           ZeroMq(false, 1), ZeroMq(true, 3)),
                         [](const auto& info) { return info.param.name; });

TEST(RingBytesTest, MatchesTwoNMinusOneOverN) {
  EXPECT_EQ(RingAllReduceBytesPerRank(1000, 4, 0), 4 * 2 * 3 * 250);
  EXPECT_EQ(RingAllReduceBytesPerRank(1000, 1, 0), 0);
}

// A queued message of an abandoned attempt is dropped by its tag; the others stay, in order.
TEST(DiscardQueuedTest, DropsTheStaleTagsOnly) {
  LoopbackHub hub(2);
  Transport& a = hub.endpoint(0);
  Transport& b = hub.endpoint(1);
  const int32_t one = 1, two = 2, three = 3;
  ASSERT_TRUE(a.Send(1, 7, &one, sizeof one).ok());
  ASSERT_TRUE(a.Send(1, 8, &two, sizeof two).ok());
  ASSERT_TRUE(a.Send(1, 7, &three, sizeof three).ok());
  EXPECT_EQ(b.DiscardQueued([](int src, int tag) { return src == 0 && tag == 7; }), 2);
  EXPECT_EQ(b.DiscardQueued([](int, int tag) { return tag == 7; }), 0);
  int32_t got = 0;
  EXPECT_EQ(b.Recv(0, 7, &got, sizeof got, 0.05).code(), StatusCode::kTimeout);
  ASSERT_TRUE(b.Recv(0, 8, &got, sizeof got, 0.05).ok());
  EXPECT_EQ(got, 2);
}

}  // namespace
}  // namespace narrows::core
