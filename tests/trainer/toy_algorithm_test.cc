// A toy algorithm registered from this file alone (nothing outside it names the toy), taken through
// every seam an algorithm plug-in has (trainer/algorithms/plugin.h): its options and their errors,
// the emulator, the planner (against the emulator's time), a run timed by sizes alone, the
// baseline's role, and a replay of its membership trace. A second toy without a prediction shows
// what the planner says of one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/trainer/distributed_fixture.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/replay_command.h"
#include "tools/cli/run_command.h"
#include "tools/cli/sizes_only.h"
#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"
#include "trainer/algorithms/plugin.h"

namespace narrows::trainer {
namespace {

// The toy: every `period` steps the members replace their parameters by their mean (local SGD
// without an outer optimiser).
struct ToyOptions : core::AlgorithmOptions {
  int64_t period = 3;
};

class ToyAverage final : public RoundAlgorithm {
 public:
  explicit ToyAverage(WorkerContext& w) : w_(w), period_(w.entry.algo.Options<ToyOptions>().period) {
    w.buffer.resize(static_cast<size_t>(w.replica.model().num_params()));
  }
  int64_t RoundSteps() const override { return period_; }
  SharedState Shared() override { return {{{"params", &w_.replica.model().flat_params()}}, nullptr}; }
  void OnJoin(int64_t, InnerState) override {}
  core::Status Step(Round*, int64_t step) override {
    w_.Record(step, w_.InnerStep(step, -1).loss);
    return core::Status::Ok();
  }
  core::Status EndRound(Round* round) override {
    torch::Tensor params = w_.replica.model().flat_params();
    NARROWS_RETURN_IF_ERROR(w_.Reduce(&round->members, params.numel(), round->end,
                                      [&] { ToHost(params.detach(), w_.buffer.data()); }, core::OnFailure::kContinue));
    torch::Tensor mean = torch::empty_like(params);
    FromHost(w_.buffer.data(), mean);
    torch::NoGradGuard no_grad;
    params.copy_(mean / static_cast<double>(round->members.size()));
    if (w_.rank == round->members.front()) {
      // The members of the round: what a replay of its membership reads back (ReplayTrace::kRounds).
      w_.records.OuterSync(round->end, w_.Now(), {{"participants", round->members}});
      w_.records.MaybeEvaluate(round->start, round->end, w_.Now(), params);
    }
    return core::Status::Ok();
  }

 private:
  WorkerContext& w_;
  const int64_t period_;
};

const core::KeyBlock kToyKeys("compare[]: toy-average", "A test's toy algorithm.");
const core::IntKey kPeriod(kToyKeys, "period", 3, 1, core::kNoMax, core::Doc("steps between averages"));


AlgorithmPlugin ToyPlugin(const std::string& name, bool planned) {
  AlgorithmPlugin p;
  p.parser.name = name;
  p.parser.shorthands = name;
  p.parser.shorthand = [name](const std::string& text) -> std::optional<core::ShorthandKeys> {
    if (text == name) return core::ShorthandKeys{};
    return std::nullopt;
  };
  p.parser.parse = [name](core::OptionReader& r, const core::Scenario&, const core::AlgorithmSpec&) {
    auto o = std::make_shared<ToyOptions>();
    o->period = r.Int(kPeriod);
    return core::ParsedOptions{o, name};
  };
  p.summary = "a test's toy: parameters averaged every `period` steps";
  p.make = [](WorkerContext& w) -> std::unique_ptr<Algorithm> { return std::make_unique<ToyAverage>(w); };
  // The planner: DiLoCo's rounds without an outer optimiser are the same messages every period.
  if (planned) {
    p.plan = [](const PlanInputs& in, const core::AlgorithmSpec& entry) {
      return std::vector<PlanRow>{
          PredictOuterRounds(in, entry.Options<ToyOptions>().period, 1, 0.0, core::CodecSpec{}, entry.collective)};
    };
  }
  // Its rounds' members are in its outer_sync events.
  p.replay = [](const core::AlgorithmSpec&) -> std::string { return ""; };
  // `run --sizes-only`: the parameters' all-reduce every period steps.
  p.sizes_only = [](const core::AlgorithmSpec& entry) {
    SizesOnlySchedule s;
    s.every = entry.Options<ToyOptions>().period;
    return s;
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_ALGORITHM(toy_average, ToyPlugin("toy-average", true));
NARROWS_REGISTER_ALGORITHM(toy_unplanned, ToyPlugin("toy-unplanned", false));

namespace {

using ToyAlgorithmTest = DistributedTest;

TEST_F(ToyAlgorithmTest, ReadsItsOptionsAndRunsInTheEmulator) {
  core::Scenario sc = Make("workers: {count: 3}\ncompare: [{algorithm: toy-average, period: 4}, {algorithm: toy-average, name: toy2}]\n");
  ASSERT_EQ(sc.compare.size(), 2u);
  EXPECT_EQ(sc.compare[0].name, "toy-average");
  EXPECT_EQ(sc.compare[0].Options<ToyOptions>().period, 4);
  EXPECT_EQ(sc.compare[1].Options<ToyOptions>().period, 3);
  EXPECT_NE(sc.resolved_yaml.find("period: 4"), std::string::npos) << sc.resolved_yaml;
  for (const auto& [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"compare: [{algorithm: toy-average, period: 0}]\n", "compare[0].period"},
           {"compare: [{algorithm: toy-average, inner_steps: 5}]\n", "compare[0].inner_steps: unknown key"}}) {
    auto bad = core::ParseScenario(yaml, "bad.yaml");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(error), std::string::npos) << bad.status().ToString();
  }

  const EntryResult r = Run(sc, 0);
  EXPECT_EQ(r.algorithm, "toy-average");
  EXPECT_GT(r.final_val_loss, 0.0);
  EXPECT_EQ(r.outer_syncs, 3);  // 12 steps, every 4
  EXPECT_GT(r.bytes_sent_per_worker, 0.0);
  const std::string metrics = Slurp(dir_ / "out" / "toy-average" / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"step\":12"), std::string::npos) << metrics;

  // Sizes only, from what its file says it sends: the bytes of its trained run, three all-reduces.
  sc.compare.erase(sc.compare.begin() + 1);
  sc.output.dir = (dir_ / "sizes").string();
  tools::RunOptions quiet;
  quiet.progress = nullptr;
  auto sizes = tools::RunSizesOnly(sc, quiet);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  const auto& toy = (*sizes)["results"][0];
  EXPECT_EQ(toy["outer_syncs"].get<int64_t>(), 3);
  EXPECT_NEAR(toy["bytes_sent_per_worker"].get<double>(), r.bytes_sent_per_worker, 0.01 * r.bytes_sent_per_worker);
}

// The planner predicts the toy from its plug-in's answer, within 5% of the emulator's time with
// modelled compute; the toy without a prediction is listed as unpredicted.
TEST_F(ToyAlgorithmTest, IsPlannedAsTheEmulatorTimesIt) {
  core::Scenario sc = Make("workers: {count: 4}\ncompare: [{algorithm: toy-average, period: 4}, toy-unplanned]\n");
  const EntryResult r = Run(sc, 0);
  auto plan = tools::MakePlan(sc, {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 1u);
  EXPECT_EQ(plan->rows[0].name, "toy-average");
  EXPECT_EQ(plan->rows[0].syncs, 3);
  EXPECT_NEAR(plan->rows[0].time_s, r.virtual_time_s, 0.05 * r.virtual_time_s);
  EXPECT_NEAR(plan->rows[0].bytes_per_worker, r.bytes_sent_per_worker, 0.01 * r.bytes_sent_per_worker);
  EXPECT_EQ(plan->unpredicted, (std::vector<std::string>{"toy-unplanned (toy-unplanned)"}));
}

// `baseline: true` on the toy: the other entries' speed-ups are over it, and the planner's too.
TEST_F(ToyAlgorithmTest, CanBeTheBaseline) {
  core::Scenario sc = Make("workers: {count: 2}\ncompare: [ddp, {algorithm: toy-average, period: 4, baseline: true}]\n");
  tools::RunOptions quiet;
  quiet.progress = nullptr;
  ASSERT_TRUE(tools::RunScenario(sc, quiet).ok());
  std::ifstream in(dir_ / "runs" / "d" / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  const auto& ddp = summary["results"][0];
  const auto& toy = summary["results"][1];
  EXPECT_FALSE(ddp["baseline"].get<bool>());
  EXPECT_TRUE(toy["baseline"].get<bool>());
  ASSERT_TRUE(toy["speedup_at_target"].is_number());
  EXPECT_DOUBLE_EQ(toy["speedup_at_target"].get<double>(), 1.0);
  if (ddp["speedup_at_target"].is_number()) {
    EXPECT_NEAR(ddp["speedup_at_target"].get<double>(),
                toy["time_to_target_s"].get<double>() / ddp["time_to_target_s"].get<double>(), 1e-9);
  }
  ASSERT_TRUE(summary["host"]["planned_speedup"].contains("ddp")) << summary["host"].dump();
  EXPECT_FALSE(summary["host"]["planned_speedup"].contains("toy-average"));
}

// Its membership trace, read from its events as a deployment's would be, replayed in the emulator,
// gives the same model bit for bit; a trace with a round's member left out gives another.
TEST_F(ToyAlgorithmTest, ItsMembershipTraceReplays) {
  core::Scenario sc = Make("workers: {count: 3}\ncompare: [{algorithm: toy-average, period: 4}]\n");
  const EntryResult live = Run(sc, 0);
  auto trace = tools::ReadMembershipTrace(Events("toy-average"), "events.jsonl");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->members.size(), 3u);
  EXPECT_EQ(trace->members.at(4), (std::vector<int>{0, 1, 2}));

  ExperimentOptions replay;
  replay.membership = Membership::kReplay;
  replay.trace = std::make_shared<const MembershipTrace>(*trace);
  const EntryResult again = Run(sc, 0, replay);
  EXPECT_EQ(again.final_val_loss, live.final_val_loss);

  MembershipTrace fewer = *trace;  // worker 2 lost in the second round, back for the third
  fewer.members.at(8) = {0, 1};
  fewer.joiners[8] = {2};
  replay.trace = std::make_shared<const MembershipTrace>(fewer);
  const EntryResult other = Run(sc, 0, replay);
  EXPECT_NE(other.final_val_loss, live.final_val_loss);
}

}  // namespace
}  // namespace narrows::trainer
