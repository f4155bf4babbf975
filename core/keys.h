// Declared keys: every key a scenario may hold is declared once, at namespace scope beside the code
// that reads it — its block, name, type, default, range or choices, unit and one line of help. The
// reader (core::OptionReader) takes the declaration, checks a value against it and writes the
// default into the resolved scenario; `narrows reference` prints every declaration as Markdown
// (docs/reference/scenario-keys.md). Declarations register themselves at static initialisation;
// reading them afterwards is thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace narrows::core {

// Whether a range's lower bound is itself allowed.
enum class Bound { kInclusive, kExclusive };

enum class KeyType { kInteger, kNumber, kBool, kText, kChoice, kNumbers, kIndexLists, kList, kMapping };
std::string KeyTypeName(KeyType type);

// A block of keys: a mapping of the scenario ("train", "network.analytic", "compare[]"), or a group
// of keys read in several places ("a link", "an entry's outer step"). `where` says where, when the
// name does not.
struct KeyBlock {
  KeyBlock(std::string name, std::string help, std::string where = "");
  std::string name;
  std::string help;
  std::string where;
};

// What the reference prints of one key.
struct KeyInfo {
  const KeyBlock* block;
  std::string name;
  KeyType type;
  std::string default_text;  // as `validate --print` writes it, or how it is derived
  bool derived;              // whether default_text says how it is derived
  std::string range;         // "[1, 1024]", "(0, 1]", "cosine, constant"; empty: any
  std::string unit;
  std::string help;
};

// The documentation of a declaration: one line of help; the unit ("s", "bit/s", "bytes"); and, for
// a default that depends on other keys, how it is derived ("from the preset").
struct Doc {
  Doc(const char* help, const char* unit = "", const char* default_text = "")
      : help(help), unit(unit), default_text(default_text) {}
  const char* help;
  const char* unit;
  const char* default_text;
};

// Every declared block and key, in the order of declaration within each file.
const std::vector<const KeyBlock*>& DeclaredBlocks();
const std::vector<const KeyInfo*>& DeclaredKeys();

// While one lives on this thread, every declared key a reader reads is noted in `read` (for the
// reference: which blocks an algorithm's parser reads).
class KeyReadLog {
 public:
  KeyReadLog();
  ~KeyReadLog();
  KeyReadLog(const KeyReadLog&) = delete;
  KeyReadLog& operator=(const KeyReadLog&) = delete;
  std::vector<const KeyInfo*> read;
};
void NoteKeyRead(const KeyInfo& key);

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// Ranges as the reference and the errors write them: "[1, inf)", "(0, 1e9]", "[1, 2^20]".
std::string IntRangeText(int64_t min, int64_t max);
std::string NumberRangeText(double min, double max, Bound lower);

// The declarations, one type per kind of value. A reader given a key reads its name, checks the
// value against its range and falls back to its default; the reader's overloads with a default
// (and a range) of their own are for defaults that depend on other keys, which the declaration's
// Doc describes.
struct IntKey {
  IntKey(const KeyBlock& block, const char* name, int64_t fallback, int64_t min, int64_t max, Doc doc);
  KeyInfo info;
  int64_t fallback, min, max;
};

struct NumberKey {
  NumberKey(const KeyBlock& block, const char* name, double fallback, double min, double max, Doc doc,
            Bound lower = Bound::kInclusive);
  KeyInfo info;
  double fallback, min, max;
  Bound lower;
};

struct BoolKey {
  BoolKey(const KeyBlock& block, const char* name, bool fallback, Doc doc);
  KeyInfo info;
  bool fallback;
};

struct TextKey {
  TextKey(const KeyBlock& block, const char* name, std::string fallback, Doc doc, std::string range = "");
  KeyInfo info;
  std::string fallback;
};

// One of a list of words: the declaration's names, or (where `names` is empty) names that come from
// a registry at the call (algorithms, plug-ins, profiles), which `range` then describes.
struct ChoiceKey {
  ChoiceKey(const KeyBlock& block, const char* name, std::vector<std::string> names, std::string fallback, Doc doc,
            std::string range = "");
  KeyInfo info;
  std::vector<std::string> names;
  std::string fallback;
};

// A choice that stands for a value of E.
template <typename E>
struct EnumKey : ChoiceKey {
  EnumKey(const KeyBlock& block, const char* name, std::vector<std::pair<std::string, E>> values, E fallback, Doc doc)
      : ChoiceKey(block, name, Names(values), NameOf(values, fallback), doc),
        values(std::move(values)),
        fallback_value(fallback) {}
  std::vector<std::pair<std::string, E>> values;
  E fallback_value;
  size_t IndexOf(E e) const {
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].second == e) return i;
    }
    return 0;
  }

 private:
  static std::vector<std::string> Names(const std::vector<std::pair<std::string, E>>& values) {
    std::vector<std::string> out;
    for (const auto& v : values) out.push_back(v.first);
    return out;
  }
  static std::string NameOf(const std::vector<std::pair<std::string, E>>& values, E e) {
    for (const auto& v : values) {
      if (v.second == e) return v.first;
    }
    return "";
  }
};

// A number, or one number per item (worker) as a list.
struct NumbersKey {
  NumbersKey(const KeyBlock& block, const char* name, double fallback, double min, double max, Doc doc);
  KeyInfo info;
  double fallback, min, max;
};

// A key whose value is a list, a list of index lists, or a mapping, read item by item or key by key
// with declarations of their own; `items` names their block.
struct StructureKey {
  StructureKey(const KeyBlock& block, const char* name, KeyType type, Doc doc, std::string items = "");
  KeyInfo info;
};

}  // namespace narrows::core
