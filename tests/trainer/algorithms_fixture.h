// The fixture of the trainer's algorithm tests (algorithms_test.cc, runs_test.cc, dipaco_test.cc,
// methods_test.cc): DistributedTest's emulated runs, with the nano model's parameter count, and a
// reader of the JSON lines a run writes.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tests/trainer/distributed_fixture.h"
#include "trainer/gpt.h"

namespace narrows::trainer {

using Json = nlohmann::json;

// The JSON objects of a JSON-lines text (metrics.jsonl, events.jsonl), blank lines skipped.
inline std::vector<Json> Lines(const std::string& text) {
  std::vector<Json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(Json::parse(line));
  }
  return out;
}

class AlgorithmsTest : public DistributedTest {
 protected:
  int64_t Params(const core::Scenario& sc) {
    core::ModelSpec model = sc.model;
    model.vocab_size = 256;
    torch::manual_seed(0);
    return Gpt(model, torch::kCPU).num_params();
  }
};

}  // namespace narrows::trainer
