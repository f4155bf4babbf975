// The command line's listings: `narrows list` (profiles, presets, algorithms), `narrows algorithms`
// and `narrows reference` (every scenario key, from the keys' declarations).
#include "tools/cli/main_args.h"

#include <iostream>
#include <memory>
#include <string>

#include "core/codec.h"
#include "tools/cli/format.h"
#include "tools/cli/reference_command.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/experiment.h"
#include "trainer/inner_optimizer.h"

namespace narrows::cli {
namespace {

// The registered algorithms (with their one-word entries), inner optimisers and codecs.
int ListAlgorithms() {
  std::printf("algorithms (compare[].algorithm:)\n");
  for (const auto* p : narrows::trainer::RegisteredAlgorithms()) {
    std::printf("%-18s %s\n%-18s   one-word entries: %s; planner: %s; run --sizes-only: %s\n", p->parser.name.c_str(),
                p->summary.c_str(), "", p->parser.shorthands.c_str(), p->plan ? "predicted" : "no prediction",
                p->sizes_only ? "modelled" : "not modelled");
  }
  std::printf("\ninner optimisers (train.optimizer:)\n");
  for (const auto* o : narrows::trainer::RegisteredInnerOptimizers()) {
    std::printf("%-18s %s\n", o->parser.name.c_str(), o->summary.c_str());
  }
  std::printf("\nouter-gradient codecs (outer_gradient:)\n");
  for (const auto* c : narrows::core::RegisteredCodecs()) std::printf("%-18s %s\n", c->name.c_str(), c->summary.c_str());
  return 0;
}

}  // namespace

Command AddReference(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "reference", "print every scenario key (type, default, range, unit, meaning) as Markdown, from the keys' declarations");
  return {cmd, [] {
            std::cout << narrows::tools::KeyReference();
            return 0;
          }};
}

Command AddAlgorithms(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "algorithms", "list the registered algorithms (with their one-word entries), inner optimisers and outer-gradient codecs");
  return {cmd, [] { return ListAlgorithms(); }};
}

Command AddList(CLI::App& app) {
  auto what = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("list", "list the built-in names a scenario can use: profiles, presets, algorithms");
  cmd->add_option("what", *what, "profiles (network.profile), presets (model.preset) or algorithms (compare:)")
      ->required()
      ->check(CLI::IsMember({"profiles", "presets", "algorithms"}));
  return {cmd, [what] {
            if (*what == "profiles") {
              std::printf("%-14s %14s %12s\n", "profile", "bandwidth", "latency");
              for (const auto& p : narrows::core::NetworkProfiles()) {
                std::printf("%-14s %14s %9.1f ms\n", p.name.c_str(), narrows::tools::Si(p.bandwidth_bps, "bit/s").c_str(),
                            p.latency_ms);
              }
              std::printf("custom: give network.bandwidth_bps and network.latency_ms yourself\n");
              return 0;
            }
            if (*what == "presets") {
              std::printf("%-12s %8s %8s %8s %8s %8s %12s\n", "preset", "d_model", "layers", "heads", "seq_len", "vocab",
                          "parameters");
              for (const auto& [name, m] : narrows::core::ModelPresets()) {
                std::printf("%-12s %8lld %8lld %8lld %8lld %8lld %12s\n", name.c_str(), static_cast<long long>(m.d_model),
                            static_cast<long long>(m.n_layers), static_cast<long long>(m.n_heads),
                            static_cast<long long>(m.seq_len), static_cast<long long>(m.vocab_size),
                            narrows::tools::Si(static_cast<double>(narrows::trainer::CostOf(m).params), "").c_str());
              }
              std::printf("vocab: the preset's own; a scenario's comes from its data (256 for text, data.vocab_size for "
                          "token shards)\n");
              return 0;
            }
            return ListAlgorithms();
          }};
}

}  // namespace narrows::cli
