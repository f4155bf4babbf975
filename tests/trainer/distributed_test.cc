// DDP and DiLoCo over the emulator: correctness identities, byte counts, determinism, faults, the
// planner against the emulated run, and peers gone bad. (Replays of a deployment: replay_test.cc.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/collectives.h"
#include "core/tags.h"
#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "tests/trainer/distributed_fixture.h"
#include "sim/analytic_model.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/sizes_only.h"
#include "trainer/experiment.h"
#include "trainer/replica.h"

namespace narrows::trainer {
namespace {

// One replica trained on `batches` (a function of the step) for the scenario's steps, evaluated at the end.
double ReferenceValLoss(const core::Scenario& sc, const std::function<TokenBatch(int64_t)>& batches) {
  auto data = LoadDataset(sc, "");
  core::ModelSpec model = sc.model;
  model.vocab_size = (*data)->vocab_size;
  ConfigureThreads(sc.threads);
  torch::manual_seed(sc.seed);
  Replica replica(model, sc.train, torch::kCPU);
  for (int64_t s = 0; s < sc.train.steps; ++s) replica.TrainStep(batches(s), LearningRate(sc.train, s));
  return replica.Evaluate((*data)->val_batches);
}

TEST_F(DistributedTest, DilocoWithOneWorkerAndOuterSgdLrOneIsPlainTraining) {
  const auto sc = Make("workers: {count: 1}\ncompare: [local-sgd-h3]\n");
  const EntryResult r = Run(sc);
  auto data = LoadDataset(sc, "");
  BatchSampler sampler((*data)->corpus, (*data)->split.train, sc.model.seq_len, sc.seed, 0, 1, sc.data.sampling);
  const double reference = ReferenceValLoss(sc, [&](int64_t) { return sampler.Next(sc.train.batch_size); });
  EXPECT_NEAR(r.final_val_loss, reference, 1e-5);
  EXPECT_EQ(r.outer_syncs, 4);
}

TEST_F(DistributedTest, DdpOverTwoWorkersIsOneReplicaWithTheirBatchesTogether) {
  const auto sc = Make("workers: {count: 2}\ncompare: [ddp]\n");
  const EntryResult r = Run(sc);
  auto data = LoadDataset(sc, "");
  BatchSampler s0((*data)->corpus, (*data)->split.train, sc.model.seq_len, sc.seed, 0, 2, sc.data.sampling);
  BatchSampler s1((*data)->corpus, (*data)->split.train, sc.model.seq_len, sc.seed, 1, 2, sc.data.sampling);
  const double reference = ReferenceValLoss(sc, [&](int64_t) {
    TokenBatch a = s0.Next(sc.train.batch_size), b = s1.Next(sc.train.batch_size);
    a.batch += b.batch;
    a.inputs.insert(a.inputs.end(), b.inputs.begin(), b.inputs.end());
    a.targets.insert(a.targets.end(), b.targets.begin(), b.targets.end());
    return a;
  });
  EXPECT_NEAR(r.final_val_loss, reference, 1e-4);
}

TEST_F(DistributedTest, BytesSentEqualTheAnalyticCountOfTheCollective) {
  const auto sc = Make("workers: {count: 4}\ncompare: [{algorithm: ddp, overlap: false}, diloco-h4,\n"
                       "  {algorithm: ddp, name: bucketed, bucket_mb: 0.05}]\n");
  auto data = LoadDataset(sc, "");
  core::ModelSpec model = sc.model;
  model.vocab_size = 256;
  torch::manual_seed(0);
  // + the loss (DDP) or the contributor count (DiLoCo), and a join vote per worker
  const int64_t count = Gpt(model, torch::kCPU).num_params() + 1 + 4;
  double per_worker = 0.0;
  for (int p = 0; p < 4; ++p) per_worker += core::RingAllReduceBytesPerRank(count, 4, p) / 4.0;
  EXPECT_DOUBLE_EQ(Run(sc, 0).bytes_sent_per_worker, per_worker * 12);  // every step
  EXPECT_DOUBLE_EQ(Run(sc, 1).bytes_sent_per_worker, per_worker * 3);   // every 4th step
  // Buckets split the same bytes differently among ring chunks: equal to within a few bytes each.
  EXPECT_NEAR(Run(sc, 2).bytes_sent_per_worker, per_worker * 12, 12 * 4 * 4 * 8.0);
}

TEST_F(DistributedTest, OverlappedDdpHidesCommunicationBehindBackward) {
  // Several buckets on a slow network: the overlapped run computes the same model, faster.
  const auto sc = Make("workers: {count: 2}\ncompare: [{algorithm: ddp, name: plain, overlap: false},\n"
                       "  {algorithm: ddp, name: overlapped, bucket_mb: 0.02}]\n",
                       "network: {profile: internet-1g}\n");
  const EntryResult plain = Run(sc, 0), overlapped = Run(sc, 1);
  EXPECT_NEAR(overlapped.final_val_loss, plain.final_val_loss, 1e-4);
  EXPECT_LT(overlapped.virtual_time_s, plain.virtual_time_s);
  EXPECT_GT(overlapped.compute_utilization, plain.compute_utilization);
}

TEST_F(DistributedTest, ModelledComputeGivesIdenticalRuns) {
  const auto sc = Make("workers: {count: 3, speed: [1, 1, 0.5]}\ncompare: [diloco-h4]\n");
  Run(sc);
  const std::string first = Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl");
  Run(sc);
  EXPECT_EQ(Slurp(dir_ / "out" / "diloco-h4" / "metrics.jsonl"), first);
  EXPECT_NE(first.find("virtual_time_s"), std::string::npos);
}

TEST_F(DistributedTest, SlowWorkerSetsTheDdpPace) {
  const auto even_sc = Make("workers: {count: 2}\ncompare: [ddp]\n");
  const EntryResult even = Run(even_sc);
  const EntryResult uneven = Run(Make("workers: {count: 2, speed: [1, 0.5]}\ncompare: [ddp]\n"));
  // Modelled step compute c = FLOPs / device_flops; at half speed the slow worker needs 2c, and
  // every all-reduce waits for it: c more per step.
  core::ModelSpec model = even_sc.model;
  model.vocab_size = 256;
  torch::manual_seed(0);
  const double c = Gpt(model, torch::kCPU).TrainFlopsPerToken() * 4 * 64 / 1e9;
  EXPECT_NEAR(uneven.virtual_time_s - even.virtual_time_s, 12 * c, 0.02 * 12 * c);
}

TEST_F(DistributedTest, DilocoBeatsDdpOnWallClockOverASlowNetwork) {
  const auto sc = Make("workers: {count: 4}\ncompare: [ddp, diloco-h4]\n");
  const EntryResult ddp = Run(sc, 0), diloco = Run(sc, 1);
  EXPECT_LT(diloco.virtual_time_s, ddp.virtual_time_s);
  EXPECT_LT(diloco.bytes_sent_per_worker, ddp.bytes_sent_per_worker);
  EXPECT_GT(diloco.compute_utilization, ddp.compute_utilization);
}

TEST_F(DistributedTest, DropoutsDoNotStopTheRun) {
  const std::string faults =
      "workers: {count: 4}\n"
      "faults: [{type: leave, worker: 3, at_step: 3}, {type: join, worker: 3, at_step: 8},\n"
      "         {type: crash, worker: 1, at_step: 5}, {type: join, worker: 1, at_step: 9},\n"
      "         {type: link_down, link: worker:2, from_s: 0.5, to_s: 1.5}]\n";
  for (const char* algo : {"ddp", "diloco-h4"}) {
    const auto sc = Make(faults + "compare: [" + algo + "]\n");
    const EntryResult r = Run(sc);
    EXPECT_GT(r.final_val_loss, 0.0) << algo;
    EXPECT_LT(r.final_val_loss, std::log(256.0)) << algo;
    const std::string events = Slurp(dir_ / "out" / algo / "events.jsonl");
    EXPECT_NE(events.find("\"join\""), std::string::npos) << algo << events;
  }
  const std::string diloco_events = Slurp(dir_ / "out" / "diloco-h4" / "events.jsonl");
  EXPECT_NE(diloco_events.find("\"crash\""), std::string::npos);
  EXPECT_NE(diloco_events.find("\"leave\""), std::string::npos);
}

TEST_F(DistributedTest, DroppedOuterGradientsAreReported) {
  const auto sc = Make("workers: {count: 4}\ncompare: [{algorithm: diloco, inner_steps: 4, drop_probability: 0.5}]\n");
  const EntryResult r = Run(sc);
  EXPECT_EQ(r.outer_syncs, 3);
  EXPECT_NE(Slurp(dir_ / "out" / "diloco-h4" / "events.jsonl").find("dropped_outer_gradient"), std::string::npos);
}

TEST_F(DistributedTest, IslandsWithHierarchicalAllReduce) {
  const auto sc = Make(
      "workers: {count: 4}\n"
      "compare: [{algorithm: ddp, name: ring}, {algorithm: ddp, name: hier, collective: hierarchical}]\n",
      "network: {topology: islands, islands: [[0, 1], [2, 3]], profile: internet-1g}\n");
  const EntryResult ring = Run(sc, 0), hier = Run(sc, 1);
  EXPECT_NEAR(ring.final_val_loss, hier.final_val_loss, 1e-4);  // same maths, other route
  EXPECT_GT(ring.virtual_time_s, 0.0);
  EXPECT_GT(hier.virtual_time_s, 0.0);
}

TEST_F(DistributedTest, Ns3NetworkTrainsTheSameModelAndAgreesOnTime) {
  // One line of the scenario changes the network model; the numerics do not depend on it, the
  // timeline agrees where the analytic model should be right (large messages, uncongested star),
  // and the ns-3 run is itself repeatable.
  const std::string algos = "workers: {count: 4}\ncompare: [{algorithm: ddp, overlap: false}, diloco-h4]\n";
  const std::string net = "network: {profile: internet-1g, model: ";
  const auto analytic_sc = Make(algos, net + "analytic}\n"), ns3_sc = Make(algos, net + "ns3}\n");
  for (size_t entry = 0; entry < 2; ++entry) {
    const EntryResult analytic = Run(analytic_sc, entry), ns3 = Run(ns3_sc, entry);
    const EntryResult again = Run(ns3_sc, entry);
    EXPECT_EQ(ns3.final_val_loss, analytic.final_val_loss) << entry;
    EXPECT_EQ(ns3.bytes_sent_per_worker, analytic.bytes_sent_per_worker) << entry;
    EXPECT_EQ(again.virtual_time_s, ns3.virtual_time_s) << entry;
    EXPECT_NE(ns3.virtual_time_s, analytic.virtual_time_s) << entry;  // a different model ran
    EXPECT_NEAR(ns3.virtual_time_s / analytic.virtual_time_s, 1.0, 0.15) << entry;
  }
}

// The capacity planner predicts what `narrows run` measures where both can run (modelled compute,
// DDP without overlap and DiLoCo), from the same network model and without training, with a
// straggler too.
TEST_F(DistributedTest, PlanAgreesWithTheEmulatedRun) {
  for (const std::string speeds : {"[1, 1, 1, 1]", "[1, 1, 0.5, 1]"}) {
    const auto sc = Make("workers: {count: 4, speed: " + speeds + "}\n"
                         "compare: [{algorithm: ddp, overlap: false}, diloco-h4]\n",
                         "network: {profile: internet-1g}\n");
    auto plan = tools::MakePlan(sc, {});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->rows.size(), 2u);
    const bool straggler = speeds != "[1, 1, 1, 1]";
    for (size_t i = 0; i < 2; ++i) {
      const EntryResult run = Run(sc, i);
      const auto& p = plan->rows[i];
      EXPECT_EQ(p.name, run.name);
      const double ratio = p.time_s / run.virtual_time_s;
      // The planner follows each worker's clock through the ring, so a straggler costs what it
      // costs the run: the others' part of the ring proceeds while it computes.
      EXPECT_NEAR(ratio, 1.0, 0.01) << p.name << (straggler ? " with a straggler" : "");
      if (!straggler) {
        EXPECT_NEAR(p.compute_s / p.time_s, run.compute_utilization, 0.01) << p.name;
      }
      EXPECT_NEAR(p.bytes_per_worker / run.bytes_sent_per_worker, 1.0, 0.001) << p.name;
    }
  }
}

TEST_F(DistributedTest, PlanForLargeModelsAndTheBandwidthTheyNeed) {
  auto sc = Make("workers: {count: 8}\ncompare: [ddp, diloco-h100]\n", "network: {profile: dc-400g}\n");
  tools::PlanOptions o;
  o.params = "405B";
  o.flops = 4e17;
  o.entries = {"{algorithm: streaming-diloco, name: streaming-int4, inner_steps: 100, fragments: 2, outer_gradient: int4}"};
  auto plan = tools::MakePlan(sc, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 3u);  // ddp, diloco-h100, the entry added to the scenario's
  EXPECT_EQ(plan->rows[2].name, "streaming-int4");
  EXPECT_DOUBLE_EQ(plan->params, 4.05e11);
  EXPECT_DOUBLE_EQ(plan->tokens, 20 * 4.05e11);
  for (const auto& r : plan->rows) {
    double last = 0;
    for (const auto& [u, bps] : r.bandwidth_for) {
      EXPECT_GE(bps, last) << r.name << " at " << u << "%";
      last = bps;
    }
  }
  // At 90% utilisation DiLoCo needs far less bandwidth than DDP, and 4-bit streaming less again.
  EXPECT_LT(plan->rows[1].bandwidth_for.at(90) * 10, plan->rows[0].bandwidth_for.at(90));
  EXPECT_LT(plan->rows[2].bandwidth_for.at(90), plan->rows[1].bandwidth_for.at(90));
  // At 400 Gbit/s DiLoCo computes most of the time.
  EXPECT_GT(plan->rows[1].compute_s / plan->rows[1].time_s, 0.5);
  o.params = "seven billion";
  EXPECT_EQ(tools::MakePlan(sc, o).status().code(), core::StatusCode::kInvalidArgument);
  // An added entry is read by its algorithm, with its errors; its name is its own.
  o.params = "405B";
  o.entries = {"{algorithm: streaming-diloco, inner_steps: 99, fragments: 2}"};
  auto bad = tools::MakePlan(sc, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("must be a multiple of fragments"), std::string::npos) << bad.status().ToString();
  o.entries = {"diloco-h100"};
  EXPECT_NE(tools::MakePlan(sc, o).status().message().find("an entry named 'diloco-h100' is planned already"),
            std::string::npos);
}

}  // namespace
}  // namespace narrows::trainer

namespace narrows::tools {
namespace {

// The per-link figures of summary.json and metrics.jsonl, from an emulated transfer: two messages
// of 1 MB over a 100 Mbit/s star (each crosses two links); the network block counts every byte
// once per link, and the metrics lines' spans add up to the same bytes.
TEST(RunNetworkTest, SummaryAndMetricsCountEveryLinksBytes) {
  emu::Engine engine(3, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(sim::UniformLinks(3, 100e6, 0.005))));
  engine.Run([&](int r) {
    std::vector<uint8_t> bytes(1'000'000);
    core::Transport& t = engine.endpoint(r);
    if (r == 0) {
      ASSERT_TRUE(t.Send(2, 1, bytes.data(), bytes.size()).ok());
    } else if (r == 1) {
      ASSERT_TRUE(t.Send(2, 1, bytes.data(), bytes.size()).ok());
    } else {
      ASSERT_TRUE(t.Recv(0, 1, bytes.data(), bytes.size()).ok());
      ASSERT_TRUE(t.Recv(1, 1, bytes.data(), bytes.size()).ok());
    }
  });
  const double end = engine.clock_of(2);  // down:2 carried both at 50 Mbit/s each: 0.16 s + latency
  EXPECT_NEAR(end, 0.16 + 0.005, 1e-6);
  const nlohmann::json links = LinksJson(engine.network(), end);
  const nlohmann::json network = NetworkSummary(links);
  EXPECT_NEAR(network["link_bytes"].get<double>(), 4e6, 1);
  EXPECT_EQ(network["links"].get<int>(), 6);
  EXPECT_EQ(network["busiest_links"][0]["link"], "down:2");
  EXPECT_NEAR(network["busiest_links"][0]["utilization"].get<double>(), 16e6 / end / 100e6, 1e-9);

  const std::string dir = testing::TempDir() + "/run_network";
  std::filesystem::create_directories(dir);
  const std::string metrics = dir + "/metrics.jsonl";
  std::ofstream(metrics) << R"({"step":1,"virtual_time_s":0.1})" << "\n"
                         << R"({"step":2,"virtual_time_s":)" << end << "}\n"
                         << R"({"step":3,"virt)" << "\n";  // a torn last line
  ASSERT_TRUE(AddNetworkToMetrics(metrics, links).ok());
  std::ifstream in(metrics);
  std::string line;
  double bytes = 0;
  std::vector<std::string> busiest;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(std::getline(in, line));
    const auto m = nlohmann::json::parse(line);
    bytes += m["network"]["link_bytes"].get<double>();
    busiest.push_back(m["network"]["busiest_link"]);
  }
  EXPECT_NEAR(bytes, 4e6, 1e3);  // the histogram's 10 ms bins split at 0.1 s exactly
  EXPECT_EQ(busiest[0], "down:2");
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, R"({"step":3,"virt)");
}

}  // namespace
}  // namespace narrows::tools

namespace narrows::trainer {
namespace {

// A sizes-only run times the same communication as training does: DiLoCo's rounds agree with the
// trained entry's virtual time (its all-reduce's few exact floats aside); DDP without overlap with
// backward takes at least the trained time. No loss, and other algorithms are refused.
TEST_F(DistributedTest, SizesOnlyTimesLikeTraining) {
  const core::Scenario sc = Make("workers: {count: 3}\ncompare: [ddp, diloco-h4]\n");
  const EntryResult ddp = Run(sc, 0), diloco = Run(sc, 1);
  const nlohmann::json sizes = SizesOnly(sc);
  const auto& results = sizes["results"];
  ASSERT_EQ(results.size(), 2u);
  tools::RunOptions quiet;
  quiet.progress = nullptr;
  EXPECT_NEAR(results[1]["virtual_time_s"].get<double>(), diloco.virtual_time_s, 0.01 * diloco.virtual_time_s);
  EXPECT_EQ(results[1]["outer_syncs"].get<int64_t>(), 3);
  EXPECT_GE(results[0]["virtual_time_s"].get<double>(), 0.99 * ddp.virtual_time_s);
  EXPECT_NEAR(results[0]["bytes_sent_per_worker"].get<double>(), ddp.bytes_sent_per_worker, 0.01 * ddp.bytes_sent_per_worker);
  EXPECT_FALSE(results[0].contains("final_val_loss"));
  EXPECT_GT(results[0]["network"]["link_bytes"].get<double>(), 0);

  const core::Scenario streaming = Make("workers: {count: 2}\ncompare: [{algorithm: streaming-diloco, inner_steps: 4}]\n");
  auto refused = tools::RunSizesOnly(streaming, quiet);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "--sizes-only models the entries of ddp, demo, diloco, sparta, toy-average, toy-unplanned only"),
            std::string::npos);
}

}  // namespace
}  // namespace narrows::trainer

namespace narrows::trainer {
namespace {

// An authenticated peer gone bad: every message it sends passes through `tamper` (tag, bytes)
// first, which may change its bytes but not its size (so it stays well-formed). Everything else
// passes through; what it starts is tampered with too.
class TamperingTransport : public core::Transport {
 public:
  using Tamper = std::function<void(int tag, std::vector<uint8_t>& bytes)>;
  TamperingTransport(core::Transport& inner, Tamper tamper) : t_(inner), tamper_(std::move(tamper)) {}
  int rank() const override { return t_.rank(); }
  int world_size() const override { return t_.world_size(); }
  core::Status Send(int dst, int tag, const void* data, size_t bytes) override {
    std::vector<uint8_t> bad(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    tamper_(tag, bad);
    return t_.Send(dst, tag, bad.data(), bytes);
  }
  core::Status SendBorrowed(int dst, int tag, const void* data, size_t bytes, core::SendLease&) override {
    return Send(dst, tag, data, bytes);
  }
  void AwaitLent(core::SendLease&) override {}
  core::Status Recv(int src, int tag, void* data, size_t bytes, double timeout_s) override {
    return t_.Recv(src, tag, data, bytes, timeout_s);
  }
  core::Status RecvInPlace(int src, int tag, size_t bytes, const std::function<void(const void*)>& consume,
                           double timeout_s) override {
    return t_.RecvInPlace(src, tag, bytes, consume, timeout_s);
  }
  core::Result<int> RecvMessage(int src, int tag, std::vector<uint8_t>* out, double timeout_s) override {
    return t_.RecvMessage(src, tag, out, timeout_s);
  }
  std::vector<int> Members() override { return t_.Members(); }
  core::Clock& clock() override { return t_.clock(); }
  core::TransportStats stats() const override { return t_.stats(); }
  std::unique_ptr<core::Work> Start(core::AsyncOp op) override {
    return t_.Start([op = std::move(op), tamper = tamper_](core::Transport& child) {
      TamperingTransport tampered(child, tamper);
      return op(tampered);
    });
  }

 private:
  core::Transport& t_;
  Tamper tamper_;
};

// NaN in place of a large message's floats from byte 256 to the middle (a header at the front and
// the exact tail at the end of the last chunk, the contributor count, stay intact).
void Poison(int, std::vector<uint8_t>& bytes) {
  if (bytes.size() < 1024) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t at = 256; at + 4 <= bytes.size() / 2; at += 4) std::memcpy(bytes.data() + at, &nan, 4);
}

// NaN from a peer never reaches an outer step: DiLoCo's and Streaming DiLoCo's members skip the
// rounds (fragments) whose sum is not finite, DiPaCo's the units, async DiLoCo's server refuses the
// push, NoLoCo's partner steps alone; an event says so each time, the global model stays finite,
// and so does the final loss.
TEST_F(DistributedTest, NonFiniteOuterGradientsNeverReachTheOuterStep) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"diloco-h4", "nonfinite_outer_gradient"},
      {"{algorithm: streaming-diloco, inner_steps: 4, fragments: 2}", "nonfinite_outer_gradient"},
      {"{algorithm: streaming-diloco, inner_steps: 4, fragments: 2, eager: true}", "nonfinite_outer_gradient"},
      {"{algorithm: dipaco, inner_steps: 4, document_tokens: 256, levels: 1}", "nonfinite_outer_gradient"},
      {"{algorithm: async-diloco, inner_steps: 4}", "\"reason\":\"non-finite\",\"step\""},
      {"noloco-h4", "\"reason\":\"non-finite parameters\""}};
  for (const auto& [entry, expected] : cases) {
    const core::Scenario sc = Make("workers: {count: 3}\ncompare: [" + entry + "]\n");
    auto data = LoadDataset(sc, "");
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    auto exp = Experiment::Create(sc, sc.compare.at(0), *data);
    ASSERT_TRUE(exp.ok()) << exp.status().ToString();
    emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
    TamperingTransport poisoned(engine.endpoint(2), Poison);
    engine.Run([&](int rank) { (*exp)->RunWorker(rank, rank == 2 ? poisoned : engine.endpoint(rank)); });
    auto r = (*exp)->Finish((dir_ / "out" / "poisoned").string());
    ASSERT_TRUE(r.ok()) << entry << ": " << r.status().ToString();
    EXPECT_TRUE(std::isfinite(r->final_val_loss)) << entry << ": " << r->final_val_loss;
    const std::string events = Slurp(dir_ / "out" / "poisoned" / "events.jsonl");
    EXPECT_NE(events.find(expected), std::string::npos) << entry << ": " << events;
  }
}

// A peer whose async pushes claim 2^30 inner steps (to spend the run's budget at once) is refused
// with an event; nothing of it is applied, and the others train to the end.
TEST_F(DistributedTest, AnImplausibleAsyncPushIsRefused) {
  const core::Scenario sc = Make("workers: {count: 3}\ncompare: [{algorithm: async-diloco, inner_steps: 4}]\n");
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto exp = Experiment::Create(sc, sc.compare.at(0), *data);
  ASSERT_TRUE(exp.ok()) << exp.status().ToString();
  emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
  TamperingTransport lying(engine.endpoint(2), [](int tag, std::vector<uint8_t>& bytes) {
    const int32_t steps = int32_t{1} << 30;  // PushHeader: kind, then steps
    if (tag == core::tags::Private(0) /* async-diloco's push */ && bytes.size() > 1024) std::memcpy(bytes.data() + 4, &steps, 4);
  });
  engine.Run([&](int rank) { (*exp)->RunWorker(rank, rank == 2 ? lying : engine.endpoint(rank)); });
  auto r = (*exp)->Finish((dir_ / "out" / "lying").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::isfinite(r->final_val_loss));
  const std::string events = Slurp(dir_ / "out" / "lying" / "events.jsonl");
  EXPECT_NE(events.find("\"reason\":\"async push of 1073741824 inner steps (at most 4)\",\"step\""), std::string::npos) << events;
  // The honest workers' pushes spent the run's budget (3 workers x steps inner steps, 4 a push):
  // a lie that had counted would have stopped the run after a few.
  size_t applied = 0;
  for (size_t at = events.find("\"type\":\"outer_sync\""); at != std::string::npos;
       at = events.find("\"type\":\"outer_sync\"", at + 1)) {
    ++applied;
  }
  EXPECT_GE(applied, static_cast<size_t>(3 * sc.train.steps / 4)) << events;
}

}  // namespace
}  // namespace narrows::trainer
