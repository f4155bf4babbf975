// The deployment's fault layer: how a worker process acts out its crash, corrupt and repeat faults
// (the contract is in tools/cli/crash_layer.h).
#include "tools/cli/crash_layer.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace narrows::tools {

CrashLayer::CrashLayer(const core::Scenario& sc, int rank) {
  auto earliest = [](int64_t& from, int64_t step) { from = from < 0 ? step : std::min(from, step); };
  for (const auto& f : sc.faults) {
    if (f.worker != rank) continue;
    if (f.kind == core::FaultKind::kCrash) crashes_[f.at_step] = f;
    if (f.kind == core::FaultKind::kCorrupt) earliest(corrupt_from_, f.at_step);
    if (f.kind == core::FaultKind::kRepeat) earliest(repeat_from_, f.at_step);
  }
}

void CrashLayer::BeforeStep(int64_t step) {
  if (corrupt_from_ >= 0 && step >= corrupt_from_) corrupting_.store(true);
  if (repeat_from_ >= 0 && step >= repeat_from_) repeating_.store(true);
  if (const auto now = crashes_.find(step); now != crashes_.end()) Die(now->second);
  const auto next = crashes_.find(step + 1);
  armed_ = next != crashes_.end() && next->second.after_sends >= 0 ? &next->second : nullptr;
  sends_left_.store(armed_ != nullptr ? armed_->after_sends : -1);
}

deploy::ZmqOptions::SendPlan CrashLayer::BeforeSend(size_t bytes) {
  if (sends_left_.load() >= 0 && sends_left_.fetch_sub(1) == 0) Die(*armed_);
  return {corrupting_.load() && bytes >= 8 ? bytes - 4 : bytes, repeating_.load()};
}

void CrashLayer::Die(const core::FaultSpec& f) {
  if (f.stall_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(f.stall_s));
  ::raise(SIGKILL);
}

}  // namespace narrows::tools
