#include "tools/cli/reference_command.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/algorithm_registry.h"
#include "core/keys.h"
#include "core/scenario.h"
#include "trainer/algorithms/plugin.h"

namespace narrows::tools {
namespace {

using core::KeyBlock;
using core::KeyInfo;

// The blocks in the order of a scenario file: the top-level sections, each followed by the blocks
// under it (its groups of keys, its lists' items, its plug-ins' blocks).
const std::vector<std::string>& Sections() {
  static const std::vector<std::string> sections = {"(top level)", "data",   "model",   "train",    "eval",
                                                    "output",      "workers", "network", "compute",  "deploy",
                                                    "faults[]",    "compare[]", "warm_start"};
  return sections;
}

std::string SectionOf(const std::string& block) {
  if (block.rfind("a link", 0) == 0) return "network";
  if (block.rfind("an entry's", 0) == 0 || block.rfind("a codec", 0) == 0) return "compare[]";
  const size_t cut = std::min(block.find('.'), block.find(": "));
  return block.substr(0, cut);
}

// Within a section: the section itself, its groups, its lists' items, its plug-ins, the codecs.
int PlaceInSection(const std::string& block) {
  if (block == SectionOf(block)) return 0;
  if (block == "a link" || block == "an entry's outer step") return 1;
  if (block == "a link's burst" || block == "an entry's batch") return 2;
  if (block.size() > 2 && block.compare(block.size() - 2, 2, "[]") == 0) return 3;
  if (block.rfind("a codec", 0) == 0) return block == "a codec" ? 5 : 6;
  return 4;
}

std::vector<const KeyBlock*> OrderedBlocks() {
  std::vector<const KeyBlock*> blocks = core::DeclaredBlocks();
  auto rank = [](const KeyBlock* b) {
    const auto& s = Sections();
    const auto at = std::find(s.begin(), s.end(), SectionOf(b->name));
    return std::make_tuple(static_cast<size_t>(at - s.begin()), PlaceInSection(b->name), b->name);
  };
  std::stable_sort(blocks.begin(), blocks.end(), [&](const KeyBlock* a, const KeyBlock* b) { return rank(a) < rank(b); });
  return blocks;
}

std::string Anchor(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (c == ' ' || c == '-' || c == '_') {
      out += c == ' ' ? '-' : c;
    }
  }
  return out;
}

// A table cell: pipes escaped.
std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string Code(const std::string& text) { return text.empty() ? "" : "`" + text + "`"; }

// Which blocks each algorithm's parser reads besides `compare[]` and its own: an entry of it, read
// with a key log.
std::map<const KeyBlock*, std::vector<std::string>> SharedBlocksByAlgorithm() {
  std::map<const KeyBlock*, std::vector<std::string>> readers;
  for (const core::AlgorithmParser* p : core::AlgorithmParsers()) {
    core::KeyReadLog log;
    (void)core::ParseScenario("workers: {count: 8}\ncompare: [{algorithm: " + p->name + "}]\n", "(reference)");
    std::set<const KeyBlock*> seen;
    for (const KeyInfo* k : log.read) {
      const std::string& block = k->block->name;
      if (block.rfind("an entry's", 0) == 0 || block == "a codec") {
        if (seen.insert(k->block).second) readers[k->block].push_back(p->name);
      }
    }
  }
  return readers;
}

}  // namespace

std::string KeyReference() {
  std::ostringstream out;
  out << "# Scenario keys\n\n"
         "Every key a scenario file may hold, printed by `narrows reference` from the keys' declarations in the "
         "code (each block's and each plug-in's). A test fails when this file differs from that output; regenerate "
         "it with `build/narrows reference > docs/reference/scenario-keys.md`. How the keys work together, with "
         "examples: [scenarios.md](../scenarios.md).\n\n"
         "- **default**: what `narrows validate --print` writes where the key is left out; where it depends on "
         "other keys, how.\n"
         "- **range**: the values accepted, `[a, b]` inclusive, `(a, b]` excluding a; anything else is an error "
         "that names the file, line, column and key.\n"
         "- A key given as `key:` with no value takes its default. `--set KEY.PATH=VALUE` sets any key "
         "(`compare.1.outer_lr=0.5` for a list's item).\n\n";
  const auto blocks = OrderedBlocks();
  const auto readers = SharedBlocksByAlgorithm();
  out << "## Blocks\n\n";
  for (const KeyBlock* b : blocks) {
    out << std::string(PlaceInSection(b->name) == 0 ? 0 : 2, ' ') << "- [" << b->name << "](#" << Anchor(b->name)
        << ")\n";
  }
  for (const KeyBlock* b : blocks) {
    out << "\n## " << b->name << "\n\n" << b->help << "\n";
    if (!b->where.empty()) out << "\nWhere: " << b->where << ".\n";
    if (const auto r = readers.find(b); r != readers.end()) {
      std::string names;
      for (const auto& n : r->second) names += (names.empty() ? "" : ", ") + Code(n);
      out << "\nRead by the entries of " << names << ".\n";
    }
    const bool empty = std::none_of(core::DeclaredKeys().begin(), core::DeclaredKeys().end(),
                                    [&](const KeyInfo* k) { return k->block == b; });
    if (!empty) out << "\n| key | type | default | range | unit | meaning |\n|---|---|---|---|---|---|\n";
    for (const KeyInfo* k : core::DeclaredKeys()) {
      if (k->block != b) continue;
      std::string type = core::KeyTypeName(k->type);
      std::string range = k->range;
      if (k->type == core::KeyType::kMapping || k->type == core::KeyType::kList) {
        if (!range.empty()) range = "see [" + range + "](#" + Anchor(range) + ")";
      }
      out << "| `" << k->name << "` | " << type << " | " << Cell(k->derived ? k->default_text : Code(k->default_text)) << " | " << Cell(range) << " | "
          << k->unit << " | " << Cell(k->help) << " |\n";
    }
    if (b->name == "compare[]") {
      out << "\nAn entry may be one word, which stands for a mapping:\n\n| algorithm | one-word entries | what it is |\n"
             "|---|---|---|\n";
      for (const auto* p : trainer::RegisteredAlgorithms()) {
        out << "| `" << p->parser.name << "` | " << Cell(p->parser.shorthands) << " | " << Cell(p->summary) << " |\n";
      }
    }
  }
  return out.str();
}

}  // namespace narrows::tools
