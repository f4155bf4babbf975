#include "core/option_reader.h"

#include "core/section.h"

namespace narrows::core {

using internal::Section;

// OptionReader forwards to the Section it stands for.
bool OptionReader::Has(const std::string& key) const { return section_->Has(key); }
bool OptionReader::HasMap(const std::string& key) const { return section_->HasMap(key); }
OptionReader OptionReader::Sub(const KeyInfo& key) {
  OptionReader sub(nullptr);
  sub.owned_ = std::make_shared<Section>(section_->Sub(key));
  sub.section_ = sub.owned_.get();
  return sub;
}
int64_t OptionReader::Int(const IntKey& key) { return section_->Int(key); }
int64_t OptionReader::Int(const IntKey& key, int64_t fallback) { return section_->Int(key, fallback); }
int64_t OptionReader::Int(const IntKey& key, int64_t fallback, int64_t min, int64_t max) {
  return section_->Int(key, fallback, min, max);
}
double OptionReader::Double(const NumberKey& key) { return section_->Double(key); }
double OptionReader::Double(const NumberKey& key, double fallback) { return section_->Double(key, fallback); }
bool OptionReader::Bool(const BoolKey& key) { return section_->Bool(key); }
bool OptionReader::Bool(const BoolKey& key, bool fallback) { return section_->Bool(key, fallback); }
std::string OptionReader::String(const TextKey& key) { return section_->String(key); }
std::string OptionReader::Choose(const ChoiceKey& key, const std::string& fallback,
                                 const std::vector<std::string>& names) {
  return section_->Choose(key, fallback, names);
}
size_t OptionReader::Choice(const ChoiceKey& key, size_t fallback, const std::vector<std::string>& names) {
  return section_->EnumIndex(key.info.name, fallback, names);
}
void OptionReader::Set(const std::string& key, const std::string& value) { section_->Set(key, value); }
void OptionReader::ErrorAt(const std::string& key, const std::string& what) { section_->ErrorAt(key, what); }
void OptionReader::Error(const std::string& what) { section_->Error(section_->node(), section_->path(), what); }
void OptionReader::Finish() { section_->Finish(); }
const std::string& OptionReader::path() const { return section_->path(); }

}  // namespace narrows::core
