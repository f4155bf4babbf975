// Declared keys (core/keys.h) and the reference printed from them (tools/cli/reference_command.cc).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include "core/codec.h"
#include "core/keys.h"
#include "core/scenario.h"
#include "sim/network_registry.h"
#include "tools/cli/reference_command.h"
#include "trainer/algorithms/plugin.h"
#include "trainer/inner_optimizer.h"

namespace narrows {
namespace {

// Every plug-in registered, so that every declaration is linked in.
void LinkEverything() {
  ASSERT_FALSE(trainer::RegisteredAlgorithms().empty());
  ASSERT_FALSE(trainer::RegisteredInnerOptimizers().empty());
  ASSERT_FALSE(core::RegisteredCodecs().empty());
  ASSERT_FALSE(sim::RegisteredNetworkModels().empty());
}

TEST(KeyReferenceTest, EveryDeclaredKeyHasHelpAndNoBlockDeclaresAKeyTwice) {
  LinkEverything();
  std::map<const core::KeyBlock*, std::set<std::string>> names;
  for (const core::KeyInfo* k : core::DeclaredKeys()) {
    EXPECT_FALSE(k->help.empty()) << k->block->name << "." << k->name << " has no help";
    EXPECT_TRUE(names[k->block].insert(k->name).second) << k->block->name << "." << k->name << " is declared twice";
    if (k->type != core::KeyType::kBool && k->type != core::KeyType::kText && k->type != core::KeyType::kMapping &&
        k->type != core::KeyType::kList && k->type != core::KeyType::kIndexLists) {
      EXPECT_FALSE(k->range.empty()) << k->block->name << "." << k->name << " has no range";
    }
  }
  for (const core::KeyBlock* b : core::DeclaredBlocks()) EXPECT_FALSE(b->help.empty()) << b->name << " has no help";
}

void Leaves(const YAML::Node& node, const std::string& key, std::set<std::string>* out) {
  if (node.IsMap()) {
    for (const auto& kv : node) Leaves(kv.second, kv.first.as<std::string>(), out);
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (item.IsMap()) Leaves(item, key, out);
    }
    out->insert(key);
  } else if (!key.empty()) {
    out->insert(key);
  }
}

// A key read without a declaration would still reach the resolved scenario: every key there of every
// shipped scenario is one some block declares, and its block is printed in the reference.
TEST(KeyReferenceTest, EveryKeyOfTheShippedScenariosIsDeclared) {
  LinkEverything();
  std::set<std::string> declared;
  for (const core::KeyInfo* k : core::DeclaredKeys()) declared.insert(k->name);
  // Blocks named after plug-ins (network.ns3, train.muon) hold their keys under the plug-in's name.
  for (const auto* m : sim::RegisteredNetworkModels()) declared.insert(m->parser.name);
  for (const auto* o : trainer::RegisteredInnerOptimizers()) declared.insert(o->parser.name);
  const std::filesystem::path source(NARROWS_SOURCE_DIR);
  int scenarios = 0;
  for (const auto& file : std::filesystem::directory_iterator(source / "scenarios")) {
    if (file.path().extension() != ".yaml") continue;
    std::vector<core::Override> sets = {{"data.path", "austen", "--set data.path=austen"}};
    // A model of the user's is named as from the repository's root: here, the build's example.
    std::ifstream in(file.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("torchscript:") != std::string::npos) {
      sets.push_back({"model.torchscript", NARROWS_MODELS_DIR "/gpt.pt", "--set model.torchscript=..."});
    }
    auto sc = core::LoadScenario(file.path().string(), sets);
    ASSERT_TRUE(sc.ok()) << file.path() << ": " << sc.status().ToString();
    std::set<std::string> keys;
    Leaves(YAML::Load(sc->resolved_yaml), "", &keys);
    for (const auto& k : keys) EXPECT_TRUE(declared.count(k)) << file.path() << ": '" << k << "' is not declared";
    ++scenarios;
  }
  EXPECT_GE(scenarios, 10);
  const std::string reference = tools::KeyReference();
  for (const core::KeyBlock* b : core::DeclaredBlocks()) {
    EXPECT_NE(reference.find("\n## " + b->name + "\n"), std::string::npos) << b->name;
  }
}

// The reference says which entries read a shared block, from what their parsers read.
TEST(KeyReferenceTest, SharedBlocksNameTheAlgorithmsThatReadThem) {
  LinkEverything();
  const std::string reference = tools::KeyReference();
  const size_t outer = reference.find("\n## an entry's outer step\n");
  ASSERT_NE(outer, std::string::npos);
  const std::string section = reference.substr(outer, reference.find("\n## ", outer + 1) - outer);
  for (const char* reader : {"`diloco`", "`streaming-diloco`", "`async-diloco`", "`dipaco`"}) {
    EXPECT_NE(section.find(reader), std::string::npos) << reader << "\n" << section;
  }
  EXPECT_EQ(section.find("`ddp`"), std::string::npos) << section;
  EXPECT_EQ(section.find("`noloco`"), std::string::npos) << section;
}

}  // namespace
}  // namespace narrows
