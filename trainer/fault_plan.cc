#include "trainer/fault_plan.h"

#include <algorithm>

namespace narrows::trainer {

FaultPlan::FaultPlan(const std::vector<core::FaultSpec>& faults, int num_workers)
    : changes_(static_cast<size_t>(num_workers)), initially_alive_(static_cast<size_t>(num_workers), true) {
  for (const auto& f : faults) {
    if (f.kind == core::FaultKind::kLinkDown || f.kind == core::FaultKind::kCorrupt || f.kind == core::FaultKind::kRepeat) {
      continue;  // not membership
    }
    auto& c = changes_[static_cast<size_t>(f.worker)];
    if (c.empty() && f.kind == core::FaultKind::kJoin) initially_alive_[static_cast<size_t>(f.worker)] = false;
    c.push_back({f.at_step, f.kind == core::FaultKind::kJoin, f.kind == core::FaultKind::kCrash});
  }
  for (auto& c : changes_) {
    std::stable_sort(c.begin(), c.end(), [](const Change& a, const Change& b) { return a.step < b.step; });
  }
}

bool FaultPlan::Alive(int worker, int64_t step) const {
  bool alive = initially_alive_[static_cast<size_t>(worker)];
  for (const auto& c : changes_[static_cast<size_t>(worker)]) {
    if (c.step <= step) alive = c.alive;
  }
  return alive;
}

std::vector<int> FaultPlan::AliveSet(int64_t step) const {
  std::vector<int> out;
  for (int w = 0; w < static_cast<int>(changes_.size()); ++w) {
    if (Alive(w, step)) out.push_back(w);
  }
  return out;
}

bool FaultPlan::CrashesAt(int worker, int64_t step) const {
  for (const auto& c : changes_[static_cast<size_t>(worker)]) {
    if (c.step == step && c.crash) return true;
  }
  return false;
}

}  // namespace narrows::trainer
