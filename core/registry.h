// Registry<T>: plug-ins of one kind by name (algorithms, network models, their scenario parsers).
// Filled at static initialisation, before main, by each plug-in's own file; read-only afterwards,
// so lookups need no lock. A registry is a function-local static of its owner (so that it exists
// before the first registration, whatever the order of static initialisation). A registry filled
// from a static library takes the generated `linked` function (cmake/NarrowsPlugins.cmake): every
// lookup calls it, which is what keeps the listed plug-ins' object files in the link.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/check.h"

namespace narrows::core {

template <typename T>
class Registry {
 public:
  // `kind` names the plug-ins in messages ("algorithm", "network model").
  explicit Registry(const char* kind, bool (*linked)() = nullptr) : kind_(kind), linked_(linked) {}

  // Two plug-ins under one name are a programming error.
  void Add(const std::string& name, T item) {
    NARROWS_CHECK(!name.empty()) << "a " << kind_ << " needs a name";
    NARROWS_CHECK(items_.emplace(name, std::move(item)).second) << kind_ << " '" << name << "' registered twice";
  }
  const T* Find(const std::string& name) const {
    CheckLinked();
    const auto it = items_.find(name);
    return it == items_.end() ? nullptr : &it->second;
  }
  // Every plug-in, by name.
  std::vector<const T*> All() const {
    CheckLinked();
    std::vector<const T*> out;
    for (const auto& [name, item] : items_) out.push_back(&item);
    return out;
  }

 private:
  void CheckLinked() const { NARROWS_CHECK(linked_ == nullptr || linked_()) << kind_ << " plug-ins not linked"; }

  const char* kind_;
  bool (*linked_)();
  std::map<std::string, T> items_;
};

}  // namespace narrows::core
