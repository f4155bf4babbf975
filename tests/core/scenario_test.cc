#include "core/scenario.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace narrows::core {
namespace {

// The error message for `yaml`, which must be rejected.
std::string ErrorOf(const std::string& yaml, std::vector<Override> overrides = {}) {
  auto r = ParseScenario(yaml, "bad.yaml", overrides);
  EXPECT_FALSE(r.ok()) << "accepted:\n" << yaml;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(ScenarioTest, DefaultsComeFromThePreset) {
  auto sc = ParseScenario("model:\n  preset: small\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->name, "x");
  EXPECT_EQ(sc->model.d_model, 256);
  EXPECT_EQ(sc->model.n_layers, 6);
  EXPECT_EQ(sc->model.base_depth, 6);  // CompleteP multipliers default to 1
  EXPECT_EQ(sc->data.path, "austen");
  EXPECT_EQ(sc->output.dir, "runs");
  EXPECT_EQ(sc->device, "cpu");
}

// The resolved scenario spells each number in its shortest form that reads back to the same
// double: 0.05, not 0.050000000000000003.
TEST(ScenarioTest, ResolvedNumbersAreTheirShortestRoundTripText) {
  auto sc = ParseScenario("train: {lr: 0.003}\ndata: {val_fraction: 0.05}\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_NE(sc->resolved_yaml.find("lr: 0.003\n"), std::string::npos) << sc->resolved_yaml;
  EXPECT_NE(sc->resolved_yaml.find("val_fraction: 0.05\n"), std::string::npos) << sc->resolved_yaml;
  EXPECT_EQ(sc->resolved_yaml.find("000000001"), std::string::npos) << sc->resolved_yaml;  // no float noise
  EXPECT_EQ(sc->resolved_yaml.find("9999999"), std::string::npos) << sc->resolved_yaml;
  EXPECT_EQ(sc->resolved_yaml.find("e+"), std::string::npos) << sc->resolved_yaml;  // whole numbers in digits
  auto again = ParseScenario(sc->resolved_yaml, "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->train.lr, 0.003);
  EXPECT_EQ(again->resolved_yaml, sc->resolved_yaml);
}

TEST(ScenarioTest, ExplicitKeysOverridePreset) {
  auto sc = ParseScenario("model: {preset: tiny, n_layers: 8, positions: rope}\ntrain: {lr: 1e-3}\n", "x");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->model.n_layers, 8);
  EXPECT_EQ(sc->model.d_model, 128);
  EXPECT_EQ(sc->model.positions, Positions::kRope);
  EXPECT_DOUBLE_EQ(sc->train.lr, 1e-3);
}

TEST(ScenarioTest, ResolvedYamlHoldsEveryKeyAndRoundTrips) {
  auto sc = ParseScenario("seed: 7\nmodel: {preset: nano}\n", "x.yaml");
  ASSERT_TRUE(sc.ok());
  EXPECT_NE(sc->resolved_yaml.find("d_model: 32"), std::string::npos) << sc->resolved_yaml;
  EXPECT_NE(sc->resolved_yaml.find("warmup_steps:"), std::string::npos);
  auto again = ParseScenario(sc->resolved_yaml, "x.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->resolved_yaml, sc->resolved_yaml);
  EXPECT_EQ(again->seed, 7u);
}

// Processes of one deployment compare digests: where each writes and reads its data may differ,
// what it trains may not.
TEST(ScenarioTest, RunDigestIgnoresOutputAndDataPathOnly) {
  auto digest = [](const std::string& yaml) {
    auto sc = ParseScenario(yaml, "x");
    EXPECT_TRUE(sc.ok()) << sc.status().message();
    return sc.ok() ? RunDigest(*sc) : std::string();
  };
  const std::string base = digest("model: {preset: nano}\ntrain: {steps: 10}\n");
  EXPECT_EQ(base.size(), 16u);
  const std::string other = std::string("data: {path: ") + NARROWS_SOURCE_DIR + "/README.md";
  EXPECT_EQ(digest("model: {preset: nano}\ntrain: {steps: 10}\noutput: {dir: elsewhere}\n" + other + "}\n"), base);
  EXPECT_NE(digest("model: {preset: nano}\ntrain: {steps: 11}\n"), base);
  EXPECT_NE(digest("model: {preset: nano}\ntrain: {steps: 10}\n" + other + ", sampling: non-iid}\n"), base);
}

TEST(ScenarioTest, DeployBulkStreamsAndQueuedBoundAreAutoOrANumber) {
  EXPECT_EQ(ParseScenario("name: x\n", "x")->deploy.bulk_streams, 1);  // the bulk plane, one connection a peer
  EXPECT_EQ(ParseScenario("deploy: {bulk_streams: 3}\n", "x")->deploy.bulk_streams, 3);
  EXPECT_EQ(ParseScenario("deploy: {bulk_streams: auto}\n", "x")->deploy.bulk_streams, DeploySpec::kAutoBulkStreams);
  EXPECT_NE(ErrorOf("deploy: {bulk_streams: lots}\n").find("bad.yaml:1:24: deploy.bulk_streams: expected auto or an integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf("deploy: {bulk_streams: 65}\n").find("deploy.bulk_streams: expected an integer in [0, 64]"),
            std::string::npos);
  EXPECT_EQ(ParseScenario("name: x\n", "x")->deploy.max_queued_mb, DeploySpec::kAutoMaxQueued);
  EXPECT_EQ(ParseScenario("deploy: {max_queued_mb: 0}\n", "x")->deploy.max_queued_mb, 0);
  EXPECT_EQ(ParseScenario("deploy: {max_queued_mb: 4096}\n", "x")->deploy.max_queued_mb, 4096);
  EXPECT_NE(ErrorOf("deploy: {max_queued_mb: -1}\n").find("deploy.max_queued_mb: expected auto or a whole number of megabytes"),
            std::string::npos);
}

TEST(ScenarioTest, OverridesApplyInDottedForm) {
  auto sc = ParseScenario("train:\n  lr: 0.1\n", "x.yaml",
                          {*ParseOverride("train.lr=3e-4"), *ParseOverride("model.preset=nano"),
                           *ParseOverride("seed=5")});
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_DOUBLE_EQ(sc->train.lr, 3e-4);
  EXPECT_EQ(sc->model.d_model, 32);
  EXPECT_EQ(sc->seed, 5u);
}

TEST(ScenarioTest, UnknownKeyNamesFileLineColumnAndPath) {
  const std::string msg = ErrorOf("seed: 1\ntrain:\n  steps: 10\n  learning_rate: 0.1\n");
  EXPECT_NE(msg.find("bad.yaml:4:3: train.learning_rate: unknown key"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lr"), std::string::npos) << "should list the known keys: " << msg;
}

TEST(ScenarioTest, WrongTypeIsReported) {
  const std::string msg = ErrorOf("train:\n  steps: many\n");
  EXPECT_NE(msg.find("bad.yaml:2:10: train.steps: expected an integer, got 'many'"), std::string::npos) << msg;
  EXPECT_NE(ErrorOf("train: 5\n").find("train: expected a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("train: {lr: [1, 2]}\n").find("train.lr: expected a number, got a list"),
            std::string::npos);
}

TEST(ScenarioTest, MultiDomainDataKeys) {
  auto sc = ParseScenario("data: {path: multi, sampling: by-domain, domain_tokens: 1000000, domain_mix: 0.25}\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->data.path, "multi");
  EXPECT_EQ(sc->data.sampling, Sampling::kByDomain);
  EXPECT_EQ(sc->data.domain_tokens, 1000000);
  EXPECT_DOUBLE_EQ(sc->data.domain_mix, 0.25);
}

TEST(ScenarioTest, BurstyLossPerLink) {
  auto sc = ParseScenario("network: {loss: 0.001, burst: {mean_good_s: 5, mean_bad_s: 0.5, loss: 0.1},\n"
                          "  workers: [{worker: 1, burst: {loss: 0.3}}]}\nworkers: {count: 2}\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_DOUBLE_EQ(sc->network.link.burst_good_s, 5);
  EXPECT_DOUBLE_EQ(sc->network.link.burst_bad_s, 0.5);
  EXPECT_DOUBLE_EQ(sc->network.link.burst_loss, 0.1);
  ASSERT_EQ(sc->network.overrides.size(), 1u);
  EXPECT_DOUBLE_EQ(sc->network.overrides[0].link.burst_good_s, 5);  // inherited, then its own loss
  EXPECT_DOUBLE_EQ(sc->network.overrides[0].link.burst_loss, 0.3);
  EXPECT_NE(ErrorOf("network: {burst: {loss: 0.9}}\n").find("network.burst.loss"), std::string::npos);
  EXPECT_NE(ErrorOf("network: {burst: {mean_bad_s: 0}}\n").find("network.burst.mean_bad_s"), std::string::npos);
  EXPECT_NE(ErrorOf("network: {burst: {often: 1}}\n").find("often"), std::string::npos);
}

TEST(ScenarioTest, OutOfRangeIsReported) {
  EXPECT_NE(ErrorOf("train: {steps: 0}\n").find("train.steps: expected an integer in [1, inf), got 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf("train: {lr: -1}\n").find("train.lr: expected a number in (0, 10], got -1"),
            std::string::npos);
  EXPECT_NE(ErrorOf("data: {val_fraction: 0.9}\n").find("data.val_fraction"), std::string::npos);
  EXPECT_NE(ErrorOf("data: {domain_mix: 1.5}\n").find("data.domain_mix: expected a number in [0, 1]"), std::string::npos);
  EXPECT_NE(ErrorOf("data: {domain_tokens: -1}\n").find("data.domain_tokens"), std::string::npos);
  EXPECT_NE(ErrorOf("data: {sampling: domains}\n").find("iid, non-iid, by-domain"), std::string::npos);
}

TEST(ScenarioTest, BadEnumListsChoices) {
  const std::string msg = ErrorOf("model:\n  preset: huge\n");
  EXPECT_NE(msg.find("bad.yaml:2:11: model.preset: expected one of nano, tiny, small"), std::string::npos) << msg;
  EXPECT_NE(ErrorOf("model: {parameterization: mup}\n").find("standard, completep"), std::string::npos);
}

TEST(ScenarioTest, CrossFieldConstraints) {
  EXPECT_NE(ErrorOf("model: {d_model: 100, n_heads: 3}\n").find("divisible by n_heads"), std::string::npos);
  EXPECT_NE(ErrorOf("train: {batch_size: 10, grad_accum: 3}\n").find("divisible by grad_accum"),
            std::string::npos);
  EXPECT_NE(ErrorOf("device: tpu\n").find("expected cpu, cuda or cuda:N"), std::string::npos);
}

TEST(ScenarioTest, AllErrorsReportedTogether) {
  const std::string msg = ErrorOf("train: {steps: -1, lr: x}\nbogus: 1\n");
  EXPECT_NE(msg.find("train.steps"), std::string::npos);
  EXPECT_NE(msg.find("train.lr"), std::string::npos);
  EXPECT_NE(msg.find("bogus: unknown key"), std::string::npos);
}

TEST(ScenarioTest, SyntaxErrorNamesPosition) {
  const std::string msg = ErrorOf("train:\n  steps: [1, 2\n");
  EXPECT_NE(msg.find("bad.yaml:"), std::string::npos);
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
}

TEST(ScenarioTest, OutOfRangeCountsAreRefusedBeforeAnythingIsSizedFromThem) {
  // A negative count once reached a std::vector constructor (abort), a huge one sized lists by it.
  EXPECT_EQ(ErrorOf("workers: {count: -3}\n"), "bad.yaml:1:18: workers.count: expected an integer in [1, 4096], got -3");
  const auto start = std::chrono::steady_clock::now();
  const std::string huge = ErrorOf("workers: {count: 100000000, speed: [1, 2]}\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(huge.find("workers.count: expected an integer in [1, 4096], got 100000000"), std::string::npos) << huge;
}

TEST(ScenarioTest, MissingDataIsRefusedWhereItIsNamed) {
  EXPECT_EQ(ErrorOf("data:\n  path: /nonexistent/corpus.txt\n"),
            "bad.yaml:2:9: data.path: '/nonexistent/corpus.txt' does not exist");
  EXPECT_NE(ErrorOf("data: {path: '/nonexistent/*.bin'}\n").find("data.path: no file matches"), std::string::npos);
  EXPECT_NE(ErrorOf("data: {val_path: /nonexistent}\n").find("data.val_path:"), std::string::npos);
  EXPECT_NE(ErrorOf("x: 1\n", {{"data.path", "/nonexistent", "data.path=/nonexistent"}}).find("--set data.path=/nonexistent"),
            std::string::npos);
  const std::string here = ::testing::TempDir() + "/scenario_test_corpus.txt";
  std::ofstream(here) << "some text";
  EXPECT_TRUE(ParseScenario("data: {path: '" + here + "'}\n", "x.yaml").ok());
}

TEST(ScenarioTest, ADocumentThatIsNotAMappingNamesItsPosition) {
  EXPECT_EQ(ErrorOf("hello world\n"), "bad.yaml:1:1: expected a mapping of keys at the top level, got 'hello world'");
  EXPECT_EQ(ErrorOf("\n\n- a\n- b\n"), "bad.yaml:3:1: expected a mapping of keys at the top level, got a list");
  EXPECT_NE(ErrorOf("? [a, b]\n: 1\n").find("bad.yaml:1:3: (top level): expected a key name, got a list"),
            std::string::npos);
}

// Inputs that once crashed the loader (found by tools/fuzz scenario) are rejected with a position.
TEST(ScenarioTest, FuzzerRegressionsAreRejectedWithAPosition) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(NARROWS_SOURCE_DIR "/tests/fuzz/scenario_regressions")) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string message = ErrorOf(text.str());
    EXPECT_EQ(message.rfind("bad.yaml:", 0), 0u) << entry.path() << ": " << message;
    ++files;
  }
  EXPECT_GE(files, 4);
}

// core names no algorithm: an entry is read by whichever parser registered its name (the trainer's
// plug-ins in the program; here, one of this test's).
struct EveryOptions : AlgorithmOptions {
  int64_t every = 0;
};
const KeyBlock kEveryKeys("compare[]: every", "A test's algorithm.");
const IntKey kEvery(kEveryKeys, "every", 1, 1, kNoMax, Doc("steps between rounds; at most train.steps"));
const bool kEveryRegistered = [] {
  RegisterAlgorithmParser({"every", "every-N",
                           [](const std::string& text) -> std::optional<ShorthandKeys> {
                             if (text.rfind("every-", 0) != 0) return std::nullopt;
                             return ShorthandKeys{{"every", text.substr(6)}};
                           },
                           [](OptionReader& r, const Scenario& sc, const AlgorithmSpec&) -> ParsedOptions {
                             auto o = std::make_shared<EveryOptions>();
                             o->every = r.Int(kEvery, 1, 1, sc.train.steps);
                             return {o, "every-" + std::to_string(o->every)};
                           }});
  return true;
}();

TEST(ScenarioTest, EntriesAreReadByTheParserTheirAlgorithmRegistered) {
  ASSERT_TRUE(kEveryRegistered);
  auto sc = ParseScenario("train: {steps: 40}\ncompare: [every-5, {algorithm: every, every: 7, collective: star}]\n",
                          "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  ASSERT_EQ(sc->compare.size(), 2u);
  EXPECT_EQ(sc->compare[0].name, "every-5");
  EXPECT_EQ(sc->compare[0].algorithm, "every");
  EXPECT_EQ(sc->compare[0].Options<EveryOptions>().every, 5);
  EXPECT_EQ(sc->compare[1].name, "every-7");  // the parser's default name
  EXPECT_EQ(sc->compare[1].collective, CollectiveKind::kStar);
  auto again = ParseScenario(sc->resolved_yaml, "x.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << sc->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, sc->resolved_yaml);
  // The parser's checks, with the scenario read so far (train.steps), and its unknown keys.
  EXPECT_NE(ErrorOf("train: {steps: 40}\ncompare: [{algorithm: every, every: 50}]\n")
                .find("bad.yaml:2:37: compare[0].every: expected an integer in [1, 40], got 50"),
            std::string::npos);
  EXPECT_NE(ErrorOf("compare: [{algorithm: every, evry: 5}]\n").find("compare[0].evry: unknown key"), std::string::npos);
  // No default algorithm is registered here: a mapping must name one.
  EXPECT_NE(ErrorOf("compare: [{every: 5}]\n").find("compare[0]: expected algorithm:"), std::string::npos);
  EXPECT_NE(ErrorOf("compare: [diloco-h5]\n").find("unknown algorithm 'diloco-h5' (expected every-N, or a mapping)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("compare: [every-3, every-3]\n").find("two entries are named 'every-3'"), std::string::npos);
}

// The inner optimiser is a block plug-in like the network model: core_tests link no trainer, so this
// file registers the default's name (reading no keys, as the trainer's AdamW) and one with a block.
struct HeavyBallOptions : PluginOptions {
  double momentum = 0.0;
};
const KeyBlock kHeavyBallKeys("train.heavy-ball", "A test's optimiser.");
const NumberKey kHeavyBallMomentum(kHeavyBallKeys, "momentum", 0.9, 0.0, 1.0, Doc("momentum"));
const bool kOptimizersRegistered = [] {
  RegisterBlockParser(BlockSlot::kInnerOptimizer,
                      {"adamw", [](OptionReader&, const Scenario&) { return std::make_shared<const PluginOptions>(); }});
  RegisterBlockParser(BlockSlot::kInnerOptimizer,
                      {"heavy-ball", [](OptionReader& r, const Scenario& sc) -> std::shared_ptr<const PluginOptions> {
                         auto o = std::make_shared<HeavyBallOptions>();
                         o->momentum = r.Double(kHeavyBallMomentum);
                         if (o->momentum > 0.0 && sc.train.grad_clip == 0.0) r.ErrorAt("momentum", "needs clipping");
                         return o;
                       }});
  return true;
}();

TEST(ScenarioTest, TheInnerOptimizerIsTheRegisteredPluginTrainNames) {
  ASSERT_TRUE(kOptimizersRegistered);
  auto plain = ParseScenario("train: {steps: 10}\n", "x.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->train.optimizer, "adamw");
  EXPECT_NE(plain->resolved_yaml.find("optimizer: adamw"), std::string::npos) << plain->resolved_yaml;

  auto sc = ParseScenario("train: {optimizer: heavy-ball, heavy-ball: {momentum: 0.5}}\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->train.optimizer, "heavy-ball");
  ASSERT_NE(sc->train.OptimizerOptions<HeavyBallOptions>(), nullptr);
  EXPECT_EQ(sc->train.OptimizerOptions<HeavyBallOptions>()->momentum, 0.5);
  auto again = ParseScenario(sc->resolved_yaml, "x.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << sc->resolved_yaml;
  EXPECT_EQ(again->resolved_yaml, sc->resolved_yaml);
  // Chosen without a block: the plug-in's defaults, spelt out in the resolved scenario.
  auto bare = ParseScenario("train: {optimizer: heavy-ball}\n", "x.yaml");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->train.OptimizerOptions<HeavyBallOptions>()->momentum, 0.9);
  EXPECT_NE(bare->resolved_yaml.find("momentum: 0.9"), std::string::npos) << bare->resolved_yaml;

  EXPECT_NE(ErrorOf("train: {optimizer: sgd}\n").find("bad.yaml:1:20: train.optimizer: expected one of adamw, heavy-ball; got 'sgd'"),
            std::string::npos)
      << ErrorOf("train: {optimizer: sgd}\n");
  // The plug-in's own range checks and unknown keys, with the sections read before (train).
  EXPECT_NE(ErrorOf("train: {optimizer: heavy-ball, heavy-ball: {momentum: 2}}\n").find("train.heavy-ball.momentum"),
            std::string::npos);
  EXPECT_NE(ErrorOf("train: {optimizer: heavy-ball, grad_clip: 0}\n").find("train.heavy-ball.momentum: needs clipping"),
            std::string::npos);
  // A block of an optimiser not chosen is still checked.
  EXPECT_NE(ErrorOf("train: {heavy-ball: {momentun: 0.5}}\n").find("train.heavy-ball.momentun: unknown key"),
            std::string::npos);
}

TEST(ScenarioTest, TheDepthExponentIsCompletePsAlone) {
  auto sc = ParseScenario("model: {parameterization: completep, depth_alpha: 0.5}\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->model.depth_alpha, 0.5);
  EXPECT_NE(ErrorOf("model: {depth_alpha: 0.5}\n").find("model.depth_alpha: applies to parameterization: completep only"),
            std::string::npos)
      << ErrorOf("model: {depth_alpha: 0.5}\n");
  EXPECT_NE(ErrorOf("model: {parameterization: completep, depth_alpha: 0.25}\n").find("model.depth_alpha"), std::string::npos);
}

// A number after a list names its item: compare.1.every sets the second entry's key; a shorthand
// entry, or an item past the end, is an error that says so.
TEST(ScenarioTest, OverridesReachAnEntryByItsPlace) {
  ASSERT_TRUE(kEveryRegistered);
  auto sc = ParseScenario("compare: [every-2, {algorithm: every, every: 3}]\n", "x.yaml", {*ParseOverride("compare.1.every=7")});
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_NE(sc->resolved_yaml.find("every: 7"), std::string::npos) << sc->resolved_yaml;
  auto shorthand = ParseScenario("compare: [every-2]\n", "x.yaml", {*ParseOverride("compare.0.every=7")});
  ASSERT_FALSE(shorthand.ok());
  EXPECT_NE(shorthand.status().message().find("item 0 is not a mapping"), std::string::npos);
  auto past = ParseScenario("compare: [every-2]\n", "x.yaml", {*ParseOverride("compare.3.every=7")});
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("not an item of a list of 1"), std::string::npos);
}

TEST(ScenarioTest, EntriesTakeTheScenariosCollectiveUnlessTheyNameOne) {
  ASSERT_TRUE(kEveryRegistered);
  auto sc = ParseScenario("collective: two-phase\ncompare: [every-2, {algorithm: every, every: 3, collective: star}]\n",
                          "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->collective, CollectiveKind::kTwoPhase);
  EXPECT_EQ(sc->compare[0].collective, CollectiveKind::kTwoPhase);
  EXPECT_EQ(sc->compare[1].collective, CollectiveKind::kStar);
  EXPECT_NE(ErrorOf("collective: butterfly\n").find("collective: expected one of ring, star, hierarchical, two-phase, tree, auto"),
            std::string::npos)
      << ErrorOf("collective: butterfly\n");
}

TEST(ScenarioTest, AWarmStartIsContinuedOnlyWhereThereIsOne) {
  auto sc = ParseScenario("warm_start: {steps: 5, optimizer: continued}\n", "x.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->warm_start.optimizer, WarmStartOptimizer::kContinued);
  EXPECT_NE(ErrorOf("warm_start: {optimizer: continued}\n").find("warm_start.optimizer: continued needs a warm start"),
            std::string::npos);
  EXPECT_NE(ErrorOf("warm_start: {steps: 5, optimizer: kept}\n").find("warm_start.optimizer"), std::string::npos);
}

TEST(ScenarioTest, WarmStart) {
  auto sc = ParseScenario("warm_start: {steps: 500}\n", "x.yaml");
  ASSERT_TRUE(sc.ok());
  EXPECT_TRUE(sc->warm_start.enabled());
  EXPECT_EQ(sc->warm_start.steps, 500);
  EXPECT_FALSE(ParseScenario("seed: 1\n", "x.yaml")->warm_start.enabled());
  EXPECT_NE(ErrorOf("warm_start: {checkpoint: /nonexistent/model.ckpt}\n").find("bad.yaml:1:26: warm_start.checkpoint:"),
            std::string::npos);
  EXPECT_NE(ErrorOf("warm_start: {steps: 5, checkpoint: /etc/hostname}\n").find("not both"), std::string::npos);
  EXPECT_NE(ErrorOf("warm_start: {stpes: 5}\n").find("unknown key"), std::string::npos);
}

TEST(ScenarioTest, OverrideErrorsNameTheOverride) {
  const std::string msg = ErrorOf("", {*ParseOverride("train.lr=fast")});
  EXPECT_NE(msg.find("--set train.lr=fast: train.lr: expected a number"), std::string::npos) << msg;
  EXPECT_NE(ErrorOf("", {*ParseOverride("train.nope=1")}).find("--set train.nope=1: train.nope: unknown key"),
            std::string::npos);
  EXPECT_FALSE(ParseOverride("no-equals-sign").ok());
  auto through_scalar = ParseScenario("seed: 1\n", "x", {*ParseOverride("seed.deep=1")});
  ASSERT_FALSE(through_scalar.ok());
  EXPECT_NE(through_scalar.status().message().find("'seed' is not a mapping"), std::string::npos);
}

TEST(ScenarioTest, DuplicateKeysAreRejected) {
  EXPECT_NE(ErrorOf("seed: 1\nseed: 2\n").find("seed: key given twice"), std::string::npos);
}

TEST(ScenarioTest, MissingFileIsNotFound) {
  auto r = LoadScenario("/nonexistent/scenario.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/scenario.yaml"), std::string::npos);
}

}  // namespace
}  // namespace narrows::core

namespace narrows::core {
namespace {

TEST(ScenarioTest, DistributedSectionsAndShorthand) {
  auto sc = ParseScenario(
      "workers: {count: 4, speed: [1, 1, 1, 0.5]}\n"
      "network: {profile: internet-1g, workers: [{worker: 2, bandwidth_bps: 5.0e7}]}\n"
      "faults: [{type: leave, worker: 3, at_step: 100}, {type: link_down, link: worker:1, from_s: 5, to_s: 9}]\n",
      "d.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_EQ(sc->workers.speed[3], 0.5);
  EXPECT_EQ(sc->network.link.bandwidth_bps, 1e9);
  EXPECT_EQ(sc->network.link.latency_ms, 50.0);
  ASSERT_EQ(sc->network.overrides.size(), 1u);
  EXPECT_EQ(sc->network.overrides[0].link.bandwidth_bps, 5e7);
  EXPECT_EQ(sc->network.overrides[0].link.latency_ms, 50.0);  // inherited
  // Resolving the resolved scenario again changes nothing more.
  auto again = ParseScenario(sc->resolved_yaml, "d.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << sc->resolved_yaml;
  auto third = ParseScenario(again->resolved_yaml, "d.yaml");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->resolved_yaml, again->resolved_yaml);
}

TEST(ScenarioTest, DistributedErrors) {
  EXPECT_NE(ErrorOf("workers: {count: 2, speed: [1, 1, 1]}\n").find("expected 2 values"), std::string::npos);
  EXPECT_NE(ErrorOf("workers: {count: 2}\nfaults: [{type: leave, worker: 5}]\n").find("faults[0].worker"),
            std::string::npos);
  // A crash inside a collective (a deployment's): only a crash, and inside a step that exists.
  EXPECT_NE(ErrorOf("workers: {count: 2}\nfaults: [{type: leave, worker: 1, at_step: 3, after_sends: 2}]\n")
                .find("faults[0].after_sends: only a crash can come after sends"),
            std::string::npos);
  EXPECT_NE(ErrorOf("workers: {count: 2}\nfaults: [{type: crash, worker: 1, at_step: 0, after_sends: 2}]\n")
                .find("faults[0].after_sends: needs at_step >= 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf("workers: {count: 2}\nfaults: [{type: join, worker: 1, at_step: 3, stall_s: 1}]\n")
                .find("faults[0].stall_s: only a crash can stall first"),
            std::string::npos);
  EXPECT_NE(ErrorOf("workers: {count: 2}\nfaults: [{type: crash, worker: 1, at_step: 3, after_sends: -1}]\n")
                .find("faults[0].after_sends"),
            std::string::npos);
  {
    auto sc = ParseScenario("workers: {count: 2}\nfaults: [{type: crash, worker: 1, at_step: 3, after_sends: 2, stall_s: 0.5},\n"
                            "  {type: crash, worker: 0, at_step: 5}]\n", "f.yaml");
    ASSERT_TRUE(sc.ok()) << sc.status().ToString();
    EXPECT_EQ(sc->faults[0].after_sends, 2);
    EXPECT_DOUBLE_EQ(sc->faults[0].stall_s, 0.5);
    EXPECT_EQ(sc->faults[1].after_sends, -1);
    EXPECT_DOUBLE_EQ(sc->faults[1].stall_s, 0.0);
  }
  EXPECT_NE(ErrorOf("workers: {count: 4}\nnetwork: {topology: islands, islands: [[0, 1], [2]]}\n")
                .find("worker 3 must be in exactly one island"),
            std::string::npos);
  EXPECT_NE(ErrorOf("network: {profile: dialup}\n").find("network.profile: expected one of dc-400g"),
            std::string::npos);
  EXPECT_NE(ErrorOf("faults: [{type: link_down, link: wan:0, from_s: 1, to_s: 2}]\n").find("wan:0"),
            std::string::npos);
  EXPECT_NE(ErrorOf("network: {model: omnet}\n").find("network.model: expected one of analytic, ns3"),
            std::string::npos);
  EXPECT_NE(ErrorOf("network: {model: ns3, ns3: {tcp: vegas}}\n").find("network.ns3.tcp"), std::string::npos);
  EXPECT_NE(ErrorOf("network: {mtu: 100000}\n").find("network.mtu"), std::string::npos);
  EXPECT_NE(ErrorOf("network: {ns3: {queue: 5}}\n").find("network.ns3.queue"), std::string::npos);
}

}  // namespace
}  // namespace narrows::core
