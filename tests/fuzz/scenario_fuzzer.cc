// libFuzzer target for the scenario loader and `--set` parsing: any bytes as a scenario file, with
// any `--set` texts, must give a scenario or an error that names where (the file with line and
// column, or the --set text) — never crash, hang, throw, or size anything from an unchecked value.
// A scenario that loads must load again from its own resolved YAML, and resolving is idempotent.
// Input layout: the YAML text, then each `--set` text after a NUL byte. Built by tools/fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/scenario.h"

namespace {

constexpr const char* kOrigin = "fuzz.yaml";

// The fuzzer links core alone: parsers named as the analytic network model and the AdamW inner
// optimiser (neither reads keys of its own) stand in for sim's and the trainer's, so that scenarios
// naming neither load.
const bool kStandInsRegistered = [] {
  using namespace narrows::core;
  auto no_keys = [](OptionReader&, const Scenario&) { return std::make_shared<const PluginOptions>(); };
  RegisterBlockParser(BlockSlot::kNetworkModel, {"analytic", no_keys});
  RegisterBlockParser(BlockSlot::kInnerOptimizer, {"adamw", no_keys});
  return true;
}();

bool NamesWhere(const std::string& message) {
  return message.rfind(std::string(kOrigin) + ":", 0) == 0 || message.rfind("--set ", 0) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace narrows::core;
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      pieces.emplace_back();
    } else {
      pieces.back().push_back(static_cast<char>(data[i]));
    }
  }
  std::vector<Override> overrides;
  for (size_t i = 1; i < pieces.size(); ++i) {
    auto o = ParseOverride(pieces[i]);
    if (!o.ok()) {
      if (o.status().message().rfind("--set ", 0) != 0) std::abort();
      return 0;
    }
    overrides.push_back(*o);
  }
  auto sc = ParseScenario(pieces[0], kOrigin, overrides);
  if (!sc.ok()) {
    if (!NamesWhere(sc.status().message())) std::abort();  // every error says where
    return 0;
  }
  if (sc->workers.count < 1 || sc->workers.speed.size() != static_cast<size_t>(sc->workers.count)) std::abort();
  // Resolving is idempotent (key order aside, which the first pass normalises).
  auto again = ParseScenario(sc->resolved_yaml, kOrigin);
  if (!again.ok()) std::abort();
  auto third = ParseScenario(again->resolved_yaml, kOrigin);
  if (!third.ok() || third->resolved_yaml != again->resolved_yaml) std::abort();
  return 0;
}
