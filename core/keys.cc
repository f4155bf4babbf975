#include "core/keys.h"

#include <cmath>
#include <cstdio>

#include "core/result_record.h"

namespace narrows::core {
namespace {

std::vector<const KeyBlock*>& Blocks() {
  static std::vector<const KeyBlock*> blocks;
  return blocks;
}
std::vector<const KeyInfo*>& Keys() {
  static std::vector<const KeyInfo*> keys;
  return keys;
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return ShortestNumber(v);
}

// A range's bound: large round numbers as powers of ten (1e12, 2.5e6), the rest as Number.
std::string Bound10(double v) {
  if (std::fabs(v) < 1e5 || v != std::floor(v)) return Number(v);
  int two = 0;
  if (v > 0 && std::frexp(v, &two) == 0.5) return "2^" + std::to_string(two - 1);  // 2^20, not 1048576
  int exponent = 0;
  double mantissa = v;
  while (std::fabs(mantissa) >= 10 && mantissa == std::floor(mantissa)) {
    mantissa /= 10;
    ++exponent;
  }
  if (mantissa != std::floor(mantissa)) {  // not a short mantissa: back one place
    mantissa *= 10;
    --exponent;
  }
  if (std::fabs(mantissa) >= 1000) return Number(v);
  return Number(mantissa) + "e" + std::to_string(exponent);
}

}  // namespace

std::string IntRangeText(int64_t min, int64_t max) {
  return "[" + Bound10(static_cast<double>(min)) + ", " +
         (max == kNoMax ? std::string("inf)") : Bound10(static_cast<double>(max)) + "]");
}

std::string NumberRangeText(double min, double max, Bound lower) {
  return (lower == Bound::kExclusive ? "(" : "[") + Bound10(min) + ", " + Bound10(max) + "]";
}

namespace {

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

KeyInfo Info(const KeyBlock& block, const char* name, KeyType type, const std::string& fallback,
             const std::string& range, const Doc& doc) {
  const bool derived = *doc.default_text != '\0';
  return KeyInfo{&block, name, type, derived ? std::string(doc.default_text) : fallback, derived, range, doc.unit, doc.help};
}

}  // namespace

std::string KeyTypeName(KeyType type) {
  switch (type) {
    case KeyType::kInteger: return "integer";
    case KeyType::kNumber: return "number";
    case KeyType::kBool: return "bool";
    case KeyType::kText: return "text";
    case KeyType::kChoice: return "choice";
    case KeyType::kNumbers: return "number or list";
    case KeyType::kIndexLists: return "list of index lists";
    case KeyType::kList: return "list";
    case KeyType::kMapping: return "mapping";
  }
  return "?";
}

KeyBlock::KeyBlock(std::string name, std::string help, std::string where)
    : name(std::move(name)), help(std::move(help)), where(std::move(where)) {
  Blocks().push_back(this);
}

namespace {
thread_local KeyReadLog* current_log = nullptr;
}  // namespace

KeyReadLog::KeyReadLog() { current_log = this; }
KeyReadLog::~KeyReadLog() { current_log = nullptr; }
void NoteKeyRead(const KeyInfo& key) {
  if (current_log != nullptr) current_log->read.push_back(&key);
}

const std::vector<const KeyBlock*>& DeclaredBlocks() { return Blocks(); }
const std::vector<const KeyInfo*>& DeclaredKeys() { return Keys(); }

IntKey::IntKey(const KeyBlock& block, const char* name, int64_t fallback, int64_t min, int64_t max, Doc doc)
    : info(Info(block, name, KeyType::kInteger, std::to_string(fallback), IntRangeText(min, max), doc)),
      fallback(fallback),
      min(min),
      max(max) {
  Keys().push_back(&info);
}

NumberKey::NumberKey(const KeyBlock& block, const char* name, double fallback, double min, double max, Doc doc,
                     Bound lower)
    : info(Info(block, name, KeyType::kNumber, Number(fallback), NumberRangeText(min, max, lower), doc)),
      fallback(fallback),
      min(min),
      max(max),
      lower(lower) {
  Keys().push_back(&info);
}

BoolKey::BoolKey(const KeyBlock& block, const char* name, bool fallback, Doc doc)
    : info(Info(block, name, KeyType::kBool, fallback ? "true" : "false", "", doc)), fallback(fallback) {
  Keys().push_back(&info);
}

TextKey::TextKey(const KeyBlock& block, const char* name, std::string fallback, Doc doc, std::string range)
    : info(Info(block, name, KeyType::kText, fallback.empty() ? "\"\"" : fallback, range, doc)),
      fallback(std::move(fallback)) {
  Keys().push_back(&info);
}

ChoiceKey::ChoiceKey(const KeyBlock& block, const char* name, std::vector<std::string> names, std::string fallback,
                     Doc doc, std::string range)
    : info(Info(block, name, KeyType::kChoice, fallback, range.empty() ? Joined(names) : range, doc)),
      names(std::move(names)),
      fallback(std::move(fallback)) {
  Keys().push_back(&info);
}

NumbersKey::NumbersKey(const KeyBlock& block, const char* name, double fallback, double min, double max, Doc doc)
    : info(Info(block, name, KeyType::kNumbers, Number(fallback), NumberRangeText(min, max, Bound::kInclusive), doc)),
      fallback(fallback),
      min(min),
      max(max) {
  Keys().push_back(&info);
}

StructureKey::StructureKey(const KeyBlock& block, const char* name, KeyType type, Doc doc, std::string items)
    : info(Info(block, name, type, type == KeyType::kMapping ? "{}" : "[]", items, doc)) {
  // A mapping left out reads as one with every key at its default, unless its Doc says otherwise.
  if (type == KeyType::kMapping && !info.derived) {
    info.default_text = "its keys' defaults";
    info.derived = true;
  }
  Keys().push_back(&info);
}

}  // namespace narrows::core
