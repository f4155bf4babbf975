// The invariants between a run's figures, checked at the end of every run (`narrows run`, each
// seed of it, a sweep's points, `narrows launch`): a figure that contradicts another is a bug of
// narrows, never an answer, so it fails the run loudly (Status::Internal, exit 1) instead of being
// printed. The figures are defined once in docs/reference/outputs.md.
//
// Checked per entry of summary.json, with its metrics.jsonl, events.jsonl and links.json:
// - to target <= total: time_to_target_s <= time_s, bytes_to_target <= bytes_sent_per_worker;
// - utilisation <= 100%: compute_utilization in [0, 1], every worker's compute within its time at
//   every logged step, every link's utilisation in [0, 1];
// - bytes: metrics.jsonl's bytes_sent never falls, and ends at most at bytes_sent_per_worker;
// - timelines: every event's time lies in [0, time_s], and a worker's leave is not before its
//   last step before the leave.
// Thread-safety: none needed (reads files).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace narrows::tools {

// Ok, or Internal naming the entry, the figures and their values of every broken invariant.
core::Status CheckFigures(const nlohmann::json& summary, const std::string& run_dir);

}  // namespace narrows::tools
