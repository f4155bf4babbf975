// Algorithm plug-ins (trainer/algorithms/plugin.h): what is registered (a toy algorithm through
// every seam: toy_algorithm_test.cc), and each built-in algorithm's reading of its own options
// (errors with file, line and key path). Inner optimisers (trainer/inner_optimizer.h) the same way:
// a toy registered here, stepped by hand and trained with.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "tests/trainer/distributed_fixture.h"
#include "tools/cli/fit.h"
#include "tools/cli/plan_command.h"
#include "trainer/algorithms/algorithm.h"
#include "trainer/algorithms/outer.h"
#include "trainer/checkpoint.h"
#include "trainer/inner_optimizer.h"

namespace narrows::trainer {
namespace {

// The toy inner optimiser: SGD with heavy-ball momentum, p -= lr * (m = momentum * m + g), over the
// whole flat buffer (no groups, no decay). Its block: train.toy-sgd.momentum.
struct ToySgdOptions : core::PluginOptions {
  double momentum = 0.0;
};

class ToySgd final : public InnerOptimizer {
 public:
  ToySgd(Gpt& model, double momentum)
      : params_(model.flat_params()), grads_(model.flat_grads()), buffer_(torch::zeros_like(params_)), momentum_(momentum) {}
  void Step(double lr) override {
    torch::NoGradGuard no_grad;
    ++steps_;
    buffer_.mul_(momentum_).add_(grads_);
    params_.sub_(buffer_ * lr);
  }
  void Reset() override {
    buffer_.zero_();
    steps_ = 0;
  }
  std::vector<std::pair<std::string, torch::Tensor*>> State() override { return {{"momentum_buffer", &buffer_}}; }

 private:
  torch::Tensor params_, grads_, buffer_;
  const double momentum_;
};

const core::KeyBlock kToySgdKeys("train.toy-sgd", "A test's toy optimiser.");
const core::NumberKey kToyMomentum(kToySgdKeys, "momentum", 0.0, 0.0, 1.0, core::Doc("heavy-ball momentum"));

InnerOptimizerPlugin ToySgdPlugin() {
  InnerOptimizerPlugin p;
  p.parser.name = "toy-sgd";
  p.parser.parse = [](core::OptionReader& r, const core::Scenario&) -> std::shared_ptr<const core::PluginOptions> {
    auto o = std::make_shared<ToySgdOptions>();
    o->momentum = r.Double(kToyMomentum);
    return o;
  };
  p.summary = "a test's toy: SGD with heavy-ball momentum";
  p.make = [](Gpt& model, const core::TrainSpec& train) -> std::unique_ptr<InnerOptimizer> {
    const auto* o = train.OptimizerOptions<ToySgdOptions>();
    return std::make_unique<ToySgd>(model, o ? o->momentum : 0.0);
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_INNER_OPTIMIZER(toy_sgd, ToySgdPlugin());

namespace {

class PluginsTest : public DistributedTest {
 protected:
  std::string ErrorOf(const std::string& yaml) {
    auto sc = core::ParseScenario(yaml, "bad.yaml");
    return sc.ok() ? std::string() : sc.status().message();
  }
};

TEST_F(PluginsTest, EveryBuiltInAlgorithmAndTheToyAreRegistered) {
  std::vector<std::string> names;
  for (const AlgorithmPlugin* p : RegisteredAlgorithms()) {
    names.push_back(p->parser.name);
    EXPECT_FALSE(p->summary.empty()) << p->parser.name;
    EXPECT_NE(core::FindAlgorithmParser(p->parser.name), nullptr) << p->parser.name;
  }
  const std::vector<std::string> expected = {"async-diloco", "ddp",    "demo",        "diloco",       "dipaco", "noloco",
                                             "sparta",       "streaming-diloco", "toy-average", "toy-unplanned"};
  EXPECT_EQ(names, expected);
  // Every built-in predicts (tests/trainer/toy_algorithm_test.cc registers the toys).
  for (const AlgorithmPlugin* p : RegisteredAlgorithms()) EXPECT_EQ(static_cast<bool>(p->plan), p->parser.name != "toy-unplanned");
}

// The decision on synthetic laws: losses are the laws', times the planner's; DDP is slower than
// DiLoCo at equal size over home internet; where DiLoCo's law is worse it needs a larger model to
// reach DDP's loss, and the break-even bandwidth is where the two times cross (DiLoCo sooner below
// it, DDP above); where its law is better it is sooner at every bandwidth.
TEST_F(PluginsTest, TheDecisionFollowsTheFittedLawsAndThePlanner) {
  auto sc = core::ParseScenario("workers: {count: 4}\nnetwork: {profile: home-100m}\ncompute: {mode: modelled, device_flops: 1e10}\n"
                                "train: {batch_size: 16}\nmodel: {preset: tiny}\ncompare: [ddp, diloco-h50]\n",
                                "decide.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto law = [](const std::string& name, double a, double beta) {
    tools::EntryFit f;
    f.entry = name;
    for (double n : {1e5, 4e5, 1.6e6, 6.4e6}) {
      for (double m : {1.0, 2.0, 4.0}) f.points.push_back({n, m, a * std::pow(n, -0.1) * std::pow(m, beta)});
    }
    f.fit = *tools::FitPowerLaw(f.points);
    return f;
  };
  tools::DecideOptions o;
  o.params = "1.6e6";
  for (double diloco_a : {10.2, 9.8}) {
    const std::vector<tools::EntryFit> fits = {law("ddp", 10.0, 0.0), law("diloco-h50", diloco_a, 0.01)};
    auto d = tools::Decide(*sc, fits, sc->compare, 20.0, o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->tokens, 20.0 * 1.6e6);
    EXPECT_EQ(d->baseline, "ddp");
    ASSERT_EQ(d->rows.size(), 6u);  // 2 entries x M = 1, 2, 4
    for (const auto& r : d->rows) {
      const double a = r.entry == "ddp" ? 10.0 : diloco_a, beta = r.entry == "ddp" ? 0.0 : 0.01;
      EXPECT_NEAR(r.loss, a * std::pow(1.6e6, -0.1) * std::pow(r.workers, beta), 1e-9);
      EXPECT_FALSE(r.extrapolated);
      EXPECT_GT(r.time_s, 0);
    }
    for (int m : {2, 4}) {
      const auto ddp = std::find_if(d->rows.begin(), d->rows.end(), [&](const auto& r) { return r.entry == "ddp" && r.workers == m; });
      const auto dil = std::find_if(d->rows.begin(), d->rows.end(), [&](const auto& r) { return r.entry != "ddp" && r.workers == m; });
      EXPECT_GT(ddp->time_s, dil->time_s) << m;
    }
    // The lowest loss and the fastest row are on the frontier.
    const auto fastest = std::min_element(d->rows.begin(), d->rows.end(), [](const auto& a, const auto& b) { return a.time_s < b.time_s; });
    EXPECT_TRUE(fastest->frontier);
    ASSERT_EQ(d->break_even.size(), 3u);
    for (const auto& b : d->break_even) {
      EXPECT_EQ(b.entry, "diloco-h50");
      const double target = 10.0 * std::pow(1.6e6, -0.1);
      EXPECT_NEAR(diloco_a * std::pow(b.equal_loss_params, -0.1) * std::pow(b.workers, 0.01), target, 1e-9);
      if (diloco_a < 10 && b.workers == 1) {
        EXPECT_TRUE(std::isinf(b.bandwidth_bps)) << b.bandwidth_bps;  // smaller model, no communication to lose
      }
      if (diloco_a > 10) {
        EXPECT_GT(b.equal_loss_params, 1.6e6);
        if (b.workers == 1) continue;  // one worker sends nothing: DDP is sooner at every bandwidth
        ASSERT_TRUE(std::isfinite(b.bandwidth_bps) && b.bandwidth_bps > 0) << b.workers;
        for (const auto& c : b.curve) {
          if (c[0] < 0.9 * b.bandwidth_bps) {
            EXPECT_GT(c[1], c[2]) << "at " << c[0] << " bit/s, M=" << b.workers;
          }
          if (c[0] > 1.1 * b.bandwidth_bps) {
            EXPECT_LT(c[1], c[2]) << "at " << c[0] << " bit/s, M=" << b.workers;
          }
        }
      }
    }
  }
  o.params = "1e9";
  auto far = tools::Decide(*sc, {law("ddp", 10.0, 0.0)}, sc->compare, 20.0, o);
  ASSERT_TRUE(far.ok());
  EXPECT_TRUE(far->rows.front().extrapolated);
  EXPECT_TRUE(far->break_even.empty());
  o.params = "lots";
  EXPECT_FALSE(tools::Decide(*sc, {law("ddp", 10.0, 0.0)}, sc->compare, 20.0, o).ok());
}

TEST_F(PluginsTest, ShorthandsSpellOutTheirAlgorithmsKeys) {
  auto sc = core::ParseScenario(
      "compare: [ddp, diloco-h25, local-sgd-h10, {algorithm: diloco, name: adam, outer_optimizer: adam},\n"
      "  {name: plain, inner_steps: 7}, streaming-diloco-h40, async-diloco, dipaco-h20]\n"
      "workers: {count: 4}\n",
      "ok.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  const auto& c = sc->compare;
  ASSERT_EQ(c.size(), 8u);
  const std::vector<std::string> algorithms = {"ddp", "diloco", "diloco", "diloco", "diloco",
                                               "streaming-diloco", "async-diloco", "dipaco"};
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].algorithm, algorithms[i]) << i;
  EXPECT_EQ(c[1].Options<OuterOptions>().inner_steps, 25);
  EXPECT_EQ(c[2].name, "local-sgd-h10");
  EXPECT_EQ(c[2].Options<OuterOptions>().outer_optimizer, OuterOptimizer::kSgd);
  EXPECT_EQ(c[2].Options<OuterOptions>().outer_lr, 1.0);
  EXPECT_EQ(c[2].Options<OuterOptions>().outer_momentum, 0.0);
  EXPECT_EQ(c[3].Options<OuterOptions>().outer_lr, 0.1);  // Adam's default
  EXPECT_EQ(c[4].name, "plain");                          // a mapping without algorithm: is DiLoCo
  EXPECT_EQ(c[4].Options<OuterOptions>().inner_steps, 7);
  EXPECT_EQ(c[5].Options<OuterOptions>().inner_steps, 40);
  EXPECT_EQ(c[6].Options<OuterOptions>().inner_steps, 50);
  EXPECT_EQ(c[7].Options<OuterOptions>().inner_steps, 20);
  // The resolved scenario reads back to the same entries.
  auto again = core::ParseScenario(sc->resolved_yaml, "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << sc->resolved_yaml;
  EXPECT_EQ(again->compare[2].Options<OuterOptions>().outer_lr, 1.0);
  EXPECT_EQ(again->compare[2].algorithm, "diloco");
  EXPECT_EQ(again->resolved_yaml, sc->resolved_yaml);
  const std::string unknown = ErrorOf("compare: [ddp, diloco-hx]\n");
  EXPECT_NE(unknown.find("bad.yaml:1:16: compare[1]: unknown algorithm 'diloco-hx' (did you mean 'diloco-hN'?) "
                         "(expected async-diloco"),
            std::string::npos) << unknown;
  EXPECT_NE(ErrorOf("compare: [ddp, ddp]\n").find("two entries are named 'ddp'"), std::string::npos);
}

TEST_F(PluginsTest, EachAlgorithmChecksItsOwnOptions) {
  auto has = [&](const std::string& yaml, const std::string& what) {
    const std::string e = ErrorOf(yaml);
    EXPECT_NE(e.find(what), std::string::npos) << "error: " << e << "\nexpected: " << what;
  };
  has("compare: [{algorithm: streaming-diloco, inner_steps: 10, fragments: 3}]\n",
      "compare[0].fragments: inner_steps (10) must be a multiple of fragments (3)");
  has("compare: [{algorithm: streaming-diloco, inner_steps: 10, fragments: 2, overlap_steps: 5}]\n",
      "compare[0].overlap_steps: must be below inner_steps / fragments = 5");
  has("model: {preset: nano}\ncompare: [{algorithm: streaming-diloco, inner_steps: 12, fragments: 3}]\n",
      "compare[0].fragments: expected at most the model's n_layers = 2");
  has("compare: [{algorithm: streaming-diloco, drop_probability: 0.5}]\n", "compare[0].drop_probability: unknown key");
  has("compare: [{algorithm: diloco, outer_gradient: fp8}]\n",
      "compare[0].outer_gradient: expected one of bf16, e3m0, fp16, fp32, int4, int8, sign, topk");
  has("compare: [{algorithm: diloco, outer_gradient: {format: int8, topk: 0.5}}]\n",
      "compare[0].outer_gradient.topk: unknown key");
  has("compare: [{algorithm: ddp, outer_gradient: int8}]\n", "compare[0].outer_gradient: unknown key");
  has("compare: [{algorithm: diloco, overlap: false}]\n", "compare[0].overlap: unknown key");
  has("compare: [{algorithm: streaming-diloco, batch: {schedule: linear}}]\n", "compare[0].batch");
  has("compare: [{algorithm: ddp, batch: {schedule: norm-test}}]\n", "it needs 2 or more");
  has("train: {batch_size: 6, grad_accum: 2}\ncompare: [{algorithm: diloco, batch: {schedule: norm-test}}]\n", "halves");
  has("compare: [{algorithm: ddp, batch: {schedule: doubling}}]\n", "compare[0].batch.schedule");
  has("warm_start: {steps: 10}\ncompare: [{algorithm: ddp, n_layers: 2}]\n", "compare[0].n_layers");
  has("workers: {count: 4}\ncompare: [{algorithm: dipaco, levels: 40, modules: 40}]\n", "at most 600");
  has("workers: {count: 2}\ncompare: [{algorithm: dipaco}]\n", "2^2 paths need at least as many workers");
  has("workers: {count: 4}\nfaults: [{type: leave, worker: 0, at_step: 5}]\ncompare: [async-diloco]\n",
      "worker 0 hosts the server");
  has("compare: [{algorithm: gossip}]\n", "compare[0].algorithm: expected one of async-diloco, ddp, demo, diloco");

  auto sc = core::ParseScenario("workers: {count: 4}\ncompare: [dipaco-h20, {algorithm: ddp, batch: {schedule: norm-test,"
                                " eta: 0.3}}, {algorithm: diloco, n_layers: 8, collective: star, batch: {schedule: linear}}]\n",
                                "ok.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->compare[2].n_layers, 8);
  EXPECT_EQ(sc->compare[2].collective, core::CollectiveKind::kStar);
  EXPECT_NE(sc->resolved_yaml.find("schedule: norm-test"), std::string::npos);
  EXPECT_NE(sc->resolved_yaml.find("schedule: linear"), std::string::npos);
  EXPECT_NE(sc->resolved_yaml.find("levels: 2"), std::string::npos);
}

TEST_F(PluginsTest, StreamingDilocoAndCompressedOuterGradients) {
  auto sc = core::ParseScenario("compare: [streaming-diloco-h40, {algorithm: streaming-diloco, inner_steps: 48, fragments: 4, overlap_steps: 2,\n"
                          "  merge_alpha: 0.75, fragment_pattern: sequential, outer_gradient: {format: int4, block: 32,\n"
                          "  error_feedback: true}}, {algorithm: diloco, outer_gradient: bf16}]\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  const auto& c = sc->compare;
  EXPECT_EQ(c[0].algorithm, "streaming-diloco");
  EXPECT_EQ(c[0].Options<OuterOptions>().inner_steps, 40);
  EXPECT_EQ(c[0].Options<OuterOptions>().outer_gradient.format, "fp32");
  // Defaults: 2 fragments, tau 1, alpha 0.5, strided.
  EXPECT_NE(sc->resolved_yaml.find("fragments: 2"), std::string::npos);
  EXPECT_NE(sc->resolved_yaml.find("fragment_pattern: strided"), std::string::npos);
  EXPECT_NE(sc->resolved_yaml.find("fragment_pattern: sequential"), std::string::npos);
  EXPECT_NE(sc->resolved_yaml.find("merge_alpha: 0.75"), std::string::npos);
  EXPECT_EQ(c[1].name, "streaming-diloco-h48");
  EXPECT_EQ(c[1].Options<OuterOptions>().outer_gradient.format, "int4");
  EXPECT_NE(sc->resolved_yaml.find("block: 32"), std::string::npos);
  EXPECT_DOUBLE_EQ(core::Codec(c[1].Options<OuterOptions>().outer_gradient).BitsPerValue(), 4.0 + 32.0 / 32);
  EXPECT_TRUE(c[1].Options<OuterOptions>().outer_gradient.error_feedback);
  EXPECT_EQ(c[2].Options<OuterOptions>().outer_gradient.format, "bf16");
  auto again = core::ParseScenario(sc->resolved_yaml, "x.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->resolved_yaml, core::ParseScenario(again->resolved_yaml, "x.yaml")->resolved_yaml);
}

TEST_F(PluginsTest, EveryInnerOptimizerAndTheToyAreRegistered) {
  std::vector<std::string> names;
  for (const InnerOptimizerPlugin* p : RegisteredInnerOptimizers()) {
    names.push_back(p->parser.name);
    EXPECT_FALSE(p->summary.empty()) << p->parser.name;
    EXPECT_NE(core::FindBlockParser(core::BlockSlot::kInnerOptimizer, p->parser.name), nullptr) << p->parser.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"adamw", "muon", "toy-sgd"}));
  EXPECT_NE(ErrorOf("train: {optimizer: sgd}\n").find("train.optimizer: expected one of adamw, muon, toy-sgd; got 'sgd'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("train: {optimizer: muon, muon: {scale: huge}}\n").find("train.muon.scale"), std::string::npos);
  EXPECT_NE(ErrorOf("train: {optimizer: toy-sgd, toy-sgd: {momentum: 1.5}}\n").find("train.toy-sgd.momentum"),
            std::string::npos);
  EXPECT_NE(ErrorOf("train: {adamw: {beta1: 0.8}}\n").find("train.adamw.beta1: unknown key"), std::string::npos);
}

TEST_F(PluginsTest, AToyInnerOptimizerFromATestFileStepsAndTrains) {
  core::Scenario sc = Make("workers: {count: 2}\ncompare: [ddp, diloco-h4]\n", "network: {profile: home-100m}\n",
                           {"train.optimizer=toy-sgd", "train.toy-sgd.momentum=0.5", "train.grad_clip=0"});
  ASSERT_EQ(sc.train.optimizer, "toy-sgd");
  ASSERT_EQ(sc.train.OptimizerOptions<ToySgdOptions>()->momentum, 0.5);

  // Two steps by hand: exactly heavy-ball SGD on the replica's own gradients.
  torch::manual_seed(1);
  Replica replica(sc.model, sc.train, torch::kCPU);
  TokenBatch batch{2, sc.model.seq_len, {}, {}};
  for (int64_t i = 0; i < 2 * sc.model.seq_len; ++i) {
    batch.inputs.push_back(i * 7 % 200);
    batch.targets.push_back((i * 7 + 3) % 200);
  }
  torch::Tensor expected = replica.model().flat_params().clone(), momentum = torch::zeros_like(expected);
  for (int step = 0; step < 2; ++step) {
    replica.ComputeGradients(batch);
    momentum = momentum * 0.5 + replica.model().flat_grads();
    expected -= momentum * 0.1;
    replica.ApplyGradients(0.1);
  }
  EXPECT_TRUE(torch::allclose(replica.model().flat_params(), expected, 1e-6, 1e-7));
  EXPECT_EQ(replica.optimizer().steps_taken(), 2);
  ASSERT_EQ(replica.optimizer().State().size(), 1u);
  EXPECT_EQ(replica.optimizer().State()[0].first, "momentum_buffer");

  // Every algorithm trains with it.
  for (size_t e = 0; e < sc.compare.size(); ++e) {
    const EntryResult r = Run(sc, e);
    EXPECT_GT(r.final_val_loss, 0.0) << sc.compare[e].name;
    EXPECT_LT(r.final_val_loss, std::log(256.0)) << sc.compare[e].name;  // below a uniform guess
  }
}

// Muon as the inner optimiser of DDP and DiLoCo: both train (below a uniform guess after 12
// steps), and a DDP worker's checkpointed state is Muon's (AdamW's moments and its momentum).
TEST_F(PluginsTest, MuonTrainsDdpAndDiloco) {
  core::Scenario sc = Make("workers: {count: 2}\ncompare: [ddp, diloco-h4]\n", "network: {profile: home-100m}\n",
                           {"train.optimizer=muon", "train.lr=0.02"});
  ASSERT_EQ(sc.train.optimizer, "muon");
  for (size_t e = 0; e < sc.compare.size(); ++e) {
    const EntryResult r = Run(sc, e);
    EXPECT_LT(r.final_val_loss, std::log(256.0) - 0.5) << sc.compare[e].name;
  }
  torch::manual_seed(1);
  Replica replica(sc.model, sc.train, torch::kCPU);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : replica.optimizer().State()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg", "exp_avg_sq", "muon_momentum"}));
}

// Every scenario the repository ships loads: scenarios/ and the studies' files under docs/.
TEST(ShippedScenariosTest, EveryScenarioFileLoads) {
  int files = 0;
  for (const char* dir : {"scenarios", "docs/results", "docs/results/papers", "docs/results/completep"}) {
    for (const auto& f : fs::directory_iterator(fs::path(NARROWS_SOURCE_DIR) / dir)) {
      if (f.path().extension() != ".yaml") continue;
      ++files;
      std::vector<core::Override> sets;
      std::ifstream in(f.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      // A model of the user's is named as from the repository's root: here, the build's example.
      if (text.find("torchscript:") != std::string::npos) {
        sets.push_back({"model.torchscript", NARROWS_MODELS_DIR "/gpt.pt", "--set model.torchscript=..."});
      }
      auto sc = core::LoadScenario(f.path().string(), sets);
      EXPECT_TRUE(sc.ok()) << f.path() << ": " << sc.status().ToString();
    }
  }
  EXPECT_GE(files, 20);
}

// The baseline the other entries are compared with: the first entry unless one says baseline: true,
// and never two.
TEST(BaselineTest, OneEntryIsTheBaselineByDefaultTheFirst) {
  auto first = core::ParseScenario("compare: [diloco-h4, ddp]\n", "b.yaml");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->compare[0].baseline);
  EXPECT_FALSE(first->compare[1].baseline);
  EXPECT_NE(first->resolved_yaml.find("baseline: true"), std::string::npos) << first->resolved_yaml;
  auto marked = core::ParseScenario("compare: [diloco-h4, {algorithm: ddp, baseline: true}]\n", "b.yaml");
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  EXPECT_FALSE(marked->compare[0].baseline);
  EXPECT_TRUE(marked->compare[1].baseline);
  auto two = core::ParseScenario("compare: [{algorithm: ddp, baseline: true}, {algorithm: diloco, baseline: true}]\n", "b.yaml");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("entries 'ddp' and 'diloco-h50' are both the baseline"), std::string::npos)
      << two.status().ToString();
}

}  // namespace
}  // namespace narrows::trainer
