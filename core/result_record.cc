#include "core/result_record.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace narrows::core {
namespace {

// Keys that say where results go, how many seeds a folder gathers, or how many CPU threads compute
// them (the same numbers up to float summation order), not what a run computes.
const std::set<std::string> kNotResults = {"name", "output", "seeds", "threads"};

// A number as ShortestNumber writes it; other text as it is.
std::string Canonical(const std::string& text) {
  if (text.empty()) return text;
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (end != begin + text.size() || errno == ERANGE || !std::isfinite(v)) return text;
  return ShortestNumber(v);
}

void Flatten(const YAML::Node& node, const std::string& path, std::map<std::string, std::string>* out) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      if (node.size() == 0) (*out)[path] = "{}";
      for (const auto& kv : node) {
        const std::string key = kv.first.as<std::string>();
        if (path.empty() && kNotResults.count(key)) continue;
        Flatten(kv.second, path.empty() ? key : path + "." + key, out);
      }
      break;
    case YAML::NodeType::Sequence:
      if (node.size() == 0) (*out)[path] = "[]";
      for (size_t i = 0; i < node.size(); ++i) Flatten(node[i], path + "." + std::to_string(i), out);
      break;
    case YAML::NodeType::Scalar:
      (*out)[path] = Canonical(node.Scalar());
      break;
    default:
      (*out)[path] = "null";
      break;
  }
}

}  // namespace

std::string ShortestNumber(double v) {
  char out[40];
  if (v == std::floor(v) && std::fabs(v) < 1e16) {
    std::snprintf(out, sizeof out, "%.0f", v);
    return out;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(out, sizeof out, "%.*g", precision, v);
    if (std::strtod(out, nullptr) == v) break;
  }
  return out;
}

std::map<std::string, std::string> ResultKeys(const std::string& resolved_yaml) {
  std::map<std::string, std::string> keys;
  try {
    Flatten(YAML::Load(resolved_yaml), "", &keys);
  } catch (const YAML::Exception&) {
    return {{"(not a scenario)", resolved_yaml.substr(0, 40)}};
  }
  return keys;
}

std::string FileDigest(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  uint64_t h = 0xcbf29ce484222325;
  unsigned char chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) {
    for (size_t i = 0; i < n; ++i) h = (h ^ chunk[i]) * 0x100000001b3;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return "";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string ResultDigest(const std::string& resolved_yaml) {
  uint64_t h = 0xcbf29ce484222325;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3;
    h = (h ^ 0xff) * 0x100000001b3;  // a separator no text contains
  };
  for (const auto& [key, value] : ResultKeys(resolved_yaml)) {
    mix(key);
    mix(value);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::optional<KeyDifference> FirstDifference(const std::map<std::string, std::string>& there,
                                             const std::map<std::string, std::string>& here) {
  std::optional<KeyDifference> first;
  size_t count = 0;
  auto note = [&](const std::string& key, const std::string& a, const std::string& b) {
    if (count++ == 0) {
      first = KeyDifference{key, a, b, 0, {}};
    } else if (first->other_keys.size() < 3) {
      first->other_keys.push_back(key);
    }
  };
  auto t = there.begin();
  auto h = here.begin();
  while (t != there.end() || h != here.end()) {
    if (h == here.end() || (t != there.end() && t->first < h->first)) {
      note(t->first, t->second, "(absent)");
      ++t;
    } else if (t == there.end() || h->first < t->first) {
      note(h->first, "(absent)", h->second);
      ++h;
    } else {
      if (t->second != h->second) note(t->first, t->second, h->second);
      ++t;
      ++h;
    }
  }
  if (first) first->others = count - 1;
  return first;
}

}  // namespace narrows::core
