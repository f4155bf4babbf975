#include "core/block_plugins.h"

#include "core/check.h"
#include "core/registry.h"
#include "core/section.h"

namespace narrows::core {
namespace {

Registry<BlockParser>& Parsers(BlockSlot slot) {
  static Registry<BlockParser> models("network model");
  static Registry<BlockParser> optimizers("inner optimiser");
  return slot == BlockSlot::kNetworkModel ? models : optimizers;
}

}  // namespace

void RegisterBlockParser(BlockSlot slot, BlockParser parser) {
  NARROWS_CHECK(parser.parse) << "'" << parser.name << "' registered without a parse function";
  const std::string name = parser.name;
  Parsers(slot).Add(name, std::move(parser));
}

const BlockParser* FindBlockParser(BlockSlot slot, const std::string& name) {
  return Parsers(slot).Find(name);
}

std::vector<const BlockParser*> BlockParsers(BlockSlot slot) {
  return Parsers(slot).All();
}

namespace internal {

std::shared_ptr<const PluginOptions> ReadBlockPlugin(Section& s, BlockSlot slot, const std::string& key,
                                                     const std::string& chosen, const Scenario& sc) {
  std::shared_ptr<const PluginOptions> options;
  // Every registered plug-in reads its own block when given (so that a mistake in a block not
  // chosen is still reported); the chosen one's options are kept.
  for (const BlockParser* p : BlockParsers(slot)) {
    if (!s.Has(p->name) && p->name != chosen) continue;
    Section sub = s.Sub(p->name);
    OptionReader reader(&sub);
    auto parsed = p->parse(reader, sc);
    sub.Finish();
    if (p->name == chosen) options = std::move(parsed);
  }
  if (FindBlockParser(slot, chosen) == nullptr) {
    std::string known;
    for (const BlockParser* p : BlockParsers(slot)) known += (known.empty() ? "" : ", ") + p->name;
    s.ErrorAt(key, "expected one of " + known + "; got '" + chosen + "'");
  }
  return options;
}

}  // namespace internal
}  // namespace narrows::core
