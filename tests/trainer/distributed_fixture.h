// The emulated-run fixture of the trainer's distributed tests: a small corpus, a nano model with
// modelled compute, and Run(scenario, entry) under the emulator with the scenario's network.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emu/engine.h"
#include "emu/network_from_scenario.h"
#include "tools/cli/sizes_only.h"
#include "trainer/experiment.h"

namespace narrows::trainer {

namespace fs = std::filesystem;

class DistributedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("narrows_dist_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream text(dir_ / "corpus.txt");
    for (int i = 0; i < 4000; ++i) text << "it is a truth universally acknowledged " << i % 23 << ".\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `sets` as `--set` would give them ("train.lr=1e-3").
  core::Scenario Make(const std::string& extra, const std::string& network = "network: {profile: home-100m}\n",
                      const std::vector<std::string>& sets = {}) {
    auto overrides = core::ParseOverrides(sets);
    EXPECT_TRUE(overrides.ok()) << overrides.status().ToString();
    auto sc = core::ParseScenario("name: d\nthreads: 2\nmodel: {preset: nano}\n"
                                  "train: {steps: 12, batch_size: 4, lr: 3e-3, warmup_steps: 2}\n"
                                  "eval: {every: 4, batches: 2, batch_size: 4}\n"
                                  "compute: {mode: modelled, device_flops: 1.0e9}\n"
                                  "output: {dir: " + (dir_ / "runs").string() + "}\n"
                                  "data: {path: " + (dir_ / "corpus.txt").string() + "}\n" + network + extra,
                                  "d.yaml", overrides.ok() ? *overrides : std::vector<core::Override>{});
    EXPECT_TRUE(sc.ok()) << sc.status().ToString();
    return *sc;
  }

  EntryResult Run(const core::Scenario& sc, size_t entry = 0, const ExperimentOptions& options = {}) {
    auto data = LoadDataset(sc, "");
    EXPECT_TRUE(data.ok()) << data.status().ToString();
    auto exp = Experiment::Create(sc, sc.compare.at(entry), *data, options);
    EXPECT_TRUE(exp.ok()) << exp.status().ToString();
    emu::Engine engine(sc.workers.count, emu::NetworkFromScenario(sc));
    engine.Run([&](int rank) { (*exp)->RunWorker(rank, engine.endpoint(rank)); });
    auto r = (*exp)->Finish((dir_ / "out" / sc.compare[entry].name).string());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : EntryResult{};
  }

  // `sc` timed by `run --sizes-only` into a folder of its own: its summary (a failure fails the test
  // and gives no rows).
  nlohmann::json SizesOnly(core::Scenario sc) {
    sc.output.dir = (dir_ / "sizes").string();
    tools::RunOptions quiet;
    quiet.progress = nullptr;
    auto timed = tools::RunSizesOnly(sc, quiet);
    EXPECT_TRUE(timed.ok()) << timed.status().ToString();
    return timed.ok() ? *timed : nlohmann::json{{"results", nlohmann::json::array()}};
  }

  std::string Slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // The events an entry's run wrote (out/<entry>/events.jsonl), one JSON object a line.
  std::vector<nlohmann::json> Events(const std::string& entry) {
    std::vector<nlohmann::json> out;
    std::istringstream lines(Slurp(dir_ / "out" / entry / "events.jsonl"));
    for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  fs::path dir_;
};

}  // namespace narrows::trainer
