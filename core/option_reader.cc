#include "core/option_reader.h"

#include "core/section.h"

namespace narrows::core {

using internal::Section;

// OptionReader forwards to the Section it stands for.
bool OptionReader::Has(const std::string& key) const { return section_->Has(key); }
bool OptionReader::HasMap(const std::string& key) const { return section_->HasMap(key); }
OptionReader OptionReader::Sub(const std::string& key) {
  OptionReader sub(nullptr);
  sub.owned_ = std::make_shared<Section>(section_->Sub(key));
  sub.section_ = sub.owned_.get();
  return sub;
}
int64_t OptionReader::Int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  return section_->Int(key, fallback, min, max);
}
double OptionReader::Double(const std::string& key, double fallback, double min, double max, Bound lower) {
  return section_->Double(key, fallback, min, max, lower);
}
bool OptionReader::Bool(const std::string& key, bool fallback) { return section_->Bool(key, fallback); }
std::string OptionReader::String(const std::string& key, const std::string& fallback) {
  return section_->String(key, fallback);
}
size_t OptionReader::EnumIndex(const std::string& key, size_t fallback, const std::vector<std::string>& names) {
  return section_->EnumIndex(key, fallback, names);
}
void OptionReader::Set(const std::string& key, const std::string& value) { section_->Set(key, value); }
void OptionReader::ErrorAt(const std::string& key, const std::string& what) { section_->ErrorAt(key, what); }
void OptionReader::Error(const std::string& what) { section_->Error(section_->node(), section_->path(), what); }
void OptionReader::Finish() { section_->Finish(); }
const std::string& OptionReader::path() const { return section_->path(); }

}  // namespace narrows::core
