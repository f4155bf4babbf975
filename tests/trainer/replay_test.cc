// Replays of a deployment in the emulator (Membership::kReplay): the members, joiners, inner steps
// and arrival order of its trace, followed bit for bit where they are the run's own; and the traces
// a replay refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "tests/trainer/distributed_fixture.h"
#include "tools/cli/replay_command.h"
#include "trainer/experiment.h"

namespace narrows::trainer {
namespace {

// Replay (Membership::kReplay) follows a deployment's trace; with every worker in every round it is
// the emulated run itself, bit for bit.
TEST_F(DistributedTest, AReplayOfEveryoneInEveryRoundIsTheRunItself) {
  const auto sc = Make("workers: {count: 3}\ncompare: [diloco-h4]\n");
  const EntryResult plain = Run(sc);
  const std::vector<nlohmann::json> events = Events("diloco-h4");
  auto trace = tools::ReadMembershipTrace(events, "events.jsonl");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->members.size(), 3u);
  EXPECT_EQ(trace->members.at(8), (std::vector<int>{0, 1, 2}));
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = std::make_shared<const MembershipTrace>(*trace);
  const EntryResult replayed = Run(sc, 0, replay);
  EXPECT_EQ(replayed.final_val_loss, plain.final_val_loss);
}

// Streaming DiLoCo without overlap synchronises one fragment at the end of each round: its trace is
// DiLoCo's form, its own trace replays it bit for bit, and a worker out of a round and back at the
// next changes it.
TEST_F(DistributedTest, StreamingWithoutOverlapIsReplayedFromItsOuterSteps) {
  const auto sc = Make("workers: {count: 3}\ncompare: [{name: sd, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, "
                       "overlap_steps: 0}]\n");
  const EntryResult plain = Run(sc);
  const std::vector<nlohmann::json> events = Events("sd");
  auto trace = tools::ReadMembershipTrace(events, "events.jsonl");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->members.size(), 6u);  // a round of 2 steps each
  // Each outer step's event carries a digest of the fragment's global parameters after it.
  const auto digests = [&] {
    std::map<int64_t, std::string> out;
    for (const auto& e : Events("sd")) {
      if (e.value("type", "") == "outer_sync") out[e.at("step").get<int64_t>()] = e.at("digest").get<std::string>();
    }
    return out;
  };
  const std::map<int64_t, std::string> run = digests();
  ASSERT_EQ(run.size(), 6u);
  EXPECT_NE(run.at(2), run.at(4));
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = std::make_shared<const MembershipTrace>(*trace);
  EXPECT_EQ(Run(sc, 0, replay).final_val_loss, plain.final_val_loss);
  EXPECT_EQ(digests(), run);
  MembershipTrace crashed = *trace;
  crashed.members[6] = {0, 1};
  crashed.joiners[6] = {2};
  replay.trace = std::make_shared<const MembershipTrace>(crashed);
  const EntryResult r = Run(sc, 0, replay);
  EXPECT_NE(r.final_val_loss, plain.final_val_loss);
  // The digests agree up to the outer step the altered trace changes, and not from it on.
  const std::map<int64_t, std::string> altered = digests();
  ASSERT_EQ(altered.size(), 6u);
  for (const auto& [step, digest] : run) {
    if (step < 6) {
      EXPECT_EQ(altered.at(step), digest) << step;
    } else if (step == 6) {
      EXPECT_NE(altered.at(step), digest) << step;
    }
  }
  EXPECT_NE(Slurp(dir_ / "out" / "sd" / "events.jsonl").find("\"type\":\"join\",\"workers\":[2]"), std::string::npos);
}

// A worker out of one round (killed in it) and welcomed back at the next: the outer steps are the
// trace's, it is welcomed, and it trains again from the global model (so the run differs from the
// one where it stayed).
TEST_F(DistributedTest, AReplayedCrashLeavesItsRoundAndRejoins) {
  const auto sc = Make("workers: {count: 3}\ncompare: [diloco-h4]\n");
  const EntryResult everyone = Run(sc);
  auto trace = std::make_shared<MembershipTrace>();
  trace->members = {{4, {0, 1, 2}}, {8, {0, 1}}, {12, {0, 1, 2}}};
  trace->joiners = {{8, {2}}};
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = trace;
  const EntryResult r = Run(sc, 0, replay);
  EXPECT_NE(r.final_val_loss, everyone.final_val_loss);
  const std::string events = Slurp(dir_ / "out" / "diloco-h4" / "events.jsonl");
  EXPECT_NE(events.find("\"participants\":[0,1],\"step\":8"), std::string::npos) << events;
  EXPECT_NE(events.find("\"participants\":[0,1,2],\"step\":12"), std::string::npos) << events;
  EXPECT_NE(events.find("\"type\":\"join\",\"workers\":[2]"), std::string::npos) << events;
  EXPECT_NE(events.find("\"type\":\"crash\",\"worker\":2"), std::string::npos) << events;
}

// DDP records no outer steps: its groups come from the crash and join events, each crash at the
// step whose collective dropped the worker.
TEST_F(DistributedTest, ADdpReplayTakesItsGroupsFromCrashesAndJoins) {
  auto trace = tools::ReadStepMembershipTrace(
      {{{"type", "crash"}, {"step", 5}, {"worker", 2}, {"survivors", {0, 1}}},
       {{"type", "join"}, {"step", 8}, {"workers", {2}}},
       {{"type", "evicted"}, {"step", 10}, {"worker", 1}, {"survivors", {0, 2}}}},
      "e.jsonl", 3, 12);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->members.size(), 12u);
  EXPECT_EQ(trace->members.at(5), (std::vector<int>{0, 1, 2}));  // the round [4, 5)
  EXPECT_EQ(trace->members.at(6), (std::vector<int>{0, 1}));
  EXPECT_EQ(trace->members.at(8), (std::vector<int>{0, 1}));
  EXPECT_EQ(trace->members.at(9), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(trace->members.at(12), (std::vector<int>{0, 2}));
  EXPECT_EQ(trace->repeated, (std::set<int64_t>{5, 10}));  // reduced whole there, not in buckets
  const auto sc = Make("workers: {count: 3}\ncompare: [ddp]\n");
  const EntryResult everyone = Run(sc);
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = std::make_shared<const MembershipTrace>(*trace);
  const EntryResult r = Run(sc, 0, replay);
  EXPECT_NE(r.final_val_loss, everyone.final_val_loss);
  EXPECT_GT(r.final_val_loss, 0.0);
  auto late = tools::ReadStepMembershipTrace({{{"type", "join"}, {"step", 12}, {"workers", {2}}}}, "e.jsonl", 3, 12);
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("e.jsonl: event 1 (join): expected a step below 12"), std::string::npos)
      << late.status().message();
}

// DyLU's inner steps are what wall time decided in a deployment: the replay takes them from the
// trace (the leader's outer_sync records every member's), not from its own clocks.
TEST_F(DistributedTest, AReplayFollowsTheRecordedInnerSteps) {
  const auto sc = Make("workers: {count: 3}\ncompare: [{algorithm: diloco, inner_steps: 4, dylu: true}]\n");
  const EntryResult plain = Run(sc);  // equal speeds: every worker takes 4 steps a round
  auto trace = std::make_shared<MembershipTrace>();
  trace->members = {{4, {0, 1, 2}}, {8, {0, 1, 2}}, {12, {0, 1, 2}}};
  // Worker 1 took 2 steps in the second round, and every worker 3 in the last.
  trace->inner_steps = {{4, {4, 2, 4}}, {8, {3, 3, 3}}};
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = trace;
  const EntryResult r = Run(sc, 0, replay);
  EXPECT_NE(r.final_val_loss, plain.final_val_loss);
  const std::string events = Slurp(dir_ / "out" / sc.compare[0].name / "events.jsonl");
  EXPECT_NE(events.find("\"inner_steps\":2,\"step\":4"), std::string::npos) << events;
  EXPECT_NE(events.find("\"inner_steps\":3,\"step\":8"), std::string::npos) << events;
  // No worker recorded step 12 (each ended its round at 11): the final evaluation still has its line.
  const std::string metrics = Slurp(dir_ / "out" / sc.compare[0].name / "metrics.jsonl");
  const auto last = metrics.rfind("{\"bytes_received\"");
  ASSERT_NE(last, std::string::npos) << metrics;
  const auto line = nlohmann::json::parse(metrics.substr(last));
  EXPECT_EQ(line.at("step"), 12) << metrics;
  EXPECT_EQ(line.at("val_loss").get<double>(), r.final_val_loss);
  EXPECT_FALSE(line.contains("train_loss"));
}

// async-diloco's replay takes the pushes in the recorded order, each from the worker the trace
// names, answering with DyLU's recorded counts: its own trace gives the run itself; two arrivals
// swapped and a count changed give that order and that count (and another model).
TEST_F(DistributedTest, AnAsyncReplayTakesThePushesInTheRecordedOrder) {
  const auto sc = Make("workers: {count: 3, speed: [1, 1, 0.5]}\n"
                       "compare: [{name: a, algorithm: async-diloco, inner_steps: 4, outer_lr: 0.35, dylu: true}]\n");
  auto events = [&] { return Events("a"); };
  auto updates = [](const std::vector<nlohmann::json>& es) {  // (worker, answered count) of each applied push
    std::vector<std::pair<int, int64_t>> out;
    for (const auto& e : es) {
      if (e.at("type") == "arrival" && e.at("kind") == "update") out.emplace_back(e.at("worker"), e.value("next_inner_steps", 0));
    }
    return out;
  };
  const EntryResult plain = Run(sc);
  const auto recorded = events();
  auto trace = tools::ReadArrivalTrace(recorded, "events.jsonl", 3);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const auto order = updates(recorded);
  ASSERT_GE(order.size(), 6u);
  EXPECT_EQ(order[1].second, 4);  // the straggler's count is halved, the others' kept
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = std::make_shared<const MembershipTrace>(*trace);
  EXPECT_EQ(Run(sc, 0, replay).final_val_loss, plain.final_val_loss);
  EXPECT_EQ(updates(events()), order);
  // Swap the first two neighbouring updates of different workers; answer the second update with 1.
  MembershipTrace changed = *trace;
  size_t i = 0;
  while (changed.arrivals[i].worker == changed.arrivals[i + 1].worker) ++i;
  std::swap(changed.arrivals[i], changed.arrivals[i + 1]);
  changed.arrivals[1].next_inner_steps = 1;
  replay.trace = std::make_shared<const MembershipTrace>(changed);
  const EntryResult other = Run(sc, 0, replay);
  EXPECT_NE(other.final_val_loss, plain.final_val_loss);
  const auto followed = updates(events());
  ASSERT_GT(followed.size(), i + 1);
  EXPECT_EQ(followed[i].first, order[i + 1].first);
  EXPECT_EQ(followed[i + 1].first, order[i].first);
  EXPECT_EQ(followed[1].second, 1);
  bool one_step = false;  // the worker answered with 1 pushed an update of 1 inner step
  for (const auto& e : events()) {
    one_step = one_step || (e.at("type") == "outer_sync" && e.at("worker") == followed[1].first && e.at("inner_steps") == 1);
  }
  EXPECT_TRUE(one_step);
  // What the trace reader refuses.
  auto crashed = tools::ReadArrivalTrace({{{"type", "arrival"}, {"worker", 0}}, {{"type", "crash"}, {"step", 3}, {"worker", 1}}},
                                         "e.jsonl", 3);
  ASSERT_FALSE(crashed.ok());
  EXPECT_NE(crashed.status().message().find("e.jsonl: event 2 (crash): async-diloco is replayed from runs without crashes"),
            std::string::npos) << crashed.status().message();
  auto stranger = tools::ReadArrivalTrace({{{"type", "arrival"}, {"worker", 3}}}, "e.jsonl", 3);
  ASSERT_FALSE(stranger.ok());
  EXPECT_NE(stranger.status().message().find("event 1 (arrival): expected a worker below 3"), std::string::npos);
}

// A trace that cannot be the run's (members who were not there, an outer step missing), an entry
// whose per-worker state a restart would lose (drop_probability's generator), and malformed events
// are refused with what and where.
TEST_F(DistributedTest, AReplayRefusesWhatItCannotFollow) {
  const auto sc = Make("workers: {count: 3}\ncompare: [diloco-h4, {algorithm: diloco, inner_steps: 4, drop_probability: 0.1, name: drop},\n"
                       "  {algorithm: streaming-diloco, inner_steps: 4, fragments: 2, name: sd}]\n");
  auto data = LoadDataset(sc, "");
  ASSERT_TRUE(data.ok());
  auto trace = std::make_shared<MembershipTrace>();
  trace->members = {{4, {0, 1}}, {8, {0, 1, 2}}};  // worker 2 back at 8 without a welcome
  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = trace;
  auto dylu = Experiment::Create(sc, sc.compare.at(1), *data, replay);
  ASSERT_FALSE(dylu.ok());
  EXPECT_NE(dylu.status().message().find("drop: cannot be replayed: drop_probability"), std::string::npos)
      << dylu.status().message();
  auto streaming = Experiment::Create(sc, sc.compare.at(2), *data, replay);
  ASSERT_FALSE(streaming.ok());
  EXPECT_NE(streaming.status().message().find("sd: cannot be replayed: a fragment's all-reduce completes during the next round"),
            std::string::npos) << streaming.status().message();
  auto exp = Experiment::Create(sc, sc.compare.at(0), *data, replay);
  ASSERT_TRUE(exp.ok());
  emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
  engine.Run([&](int rank) { (*exp)->RunWorker(rank, engine.endpoint(rank)); });
  EXPECT_NE((*exp)->status().message().find("the members at step 8 are not among the workers present"), std::string::npos)
      << (*exp)->status().message();
  auto bad = tools::ReadMembershipTrace({{{"type", "outer_sync"}, {"step", 4}, {"participants", {0, "x"}}}}, "e.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("e.jsonl: event 1 (outer_sync): \"participants\" holds \"x\""), std::string::npos)
      << bad.status().message();
  auto twice = tools::ReadMembershipTrace({{{"type", "outer_sync"}, {"step", 4}, {"participants", {0, 1}}},
                                           {{"type", "outer_sync"}, {"step", 4}, {"participants", {0}}}}, "e.jsonl");
  EXPECT_FALSE(twice.ok());
}

}  // namespace
}  // namespace narrows::trainer
