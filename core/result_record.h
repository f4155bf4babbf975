// What a result folder records of the scenario that produced it, and the comparison that decides
// whether a folder's results answer another scenario (as Hydra keeps the resolved config beside
// every run, and a build system reuses an output only when its inputs' digest matches).
//
// The record is the resolved scenario (Scenario::resolved_yaml, written to <folder>/scenario.yaml)
// read as flat keys. Everything in it determines the numbers except `name` and `output` (where the
// results go), `seeds` (how many seeds one folder gathers; each seed's own folder records its
// `seed`) and `threads` (CPU threads: the same numbers up to float summation order). Numbers are compared by value, so 0.05 and 0.050000000000000003 are one value.
// Pure functions; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace narrows::core {

// The keys of a resolved scenario that determine its numbers, as dotted paths ("train.steps",
// "compare.1.inner_steps") mapped to their values as text, numbers in shortest round-trip form.
// Text that is not YAML gives one key, "(not a scenario)".
std::map<std::string, std::string> ResultKeys(const std::string& resolved_yaml);
// A number as the shortest text that reads back to the same double, in plain digits where it is a
// whole number under 1e16 (40, 100000000; not 4e+01), else as %g writes it (0.05, 1e-08).
std::string ShortestNumber(double v);

// FNV-1a (64 bits) of ResultKeys, as 16 hex digits.
std::string ResultDigest(const std::string& resolved_yaml);
// FNV-1a (64 bits) of a file's bytes, as 16 hex digits ("" if it cannot be read): a torchscript
// model's file, which the resolved scenario records (model.torchscript_digest).
std::string FileDigest(const std::string& path);

struct KeyDifference {
  std::string key;
  std::string there;  // the recorded value ("(absent)" where the record lacks the key)
  std::string here;   // the asked-for value
  size_t others = 0;  // how many other keys differ
  std::vector<std::string> other_keys;  // the first few of them, in path order
};

// The first key (in path order) whose value differs between two records; none if they are equal.
std::optional<KeyDifference> FirstDifference(const std::map<std::string, std::string>& there,
                                             const std::map<std::string, std::string>& here);

}  // namespace narrows::core
