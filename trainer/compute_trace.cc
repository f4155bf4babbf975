#include "trainer/compute_trace.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace narrows::trainer {

core::Result<ComputeTrace> LoadComputeTrace(const std::string& path, int workers, int64_t steps) {
  const std::string where = "compute.trace: " + path;
  std::ifstream in(path);
  if (!in) return core::Status::InvalidArgument(where + ": cannot be read");
  ComputeTrace trace;
  trace.path = path;
  trace.seconds.assign(static_cast<size_t>(workers), {});
  std::vector<double> before(static_cast<size_t>(workers), 0.0);  // cumulative compute_s so far
  std::string line;
  int64_t number = 0, last_step = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string at = where + ":" + std::to_string(number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      return core::Status::InvalidArgument(at + ": not a line of a run's metrics.jsonl");
    }
    if (!j.contains("workers")) continue;  // an evaluation's line
    const auto& ws = j["workers"];
    const int64_t step = j["step"].get<int64_t>();
    if (!ws.is_array() || static_cast<int>(ws.size()) != workers) {
      return core::Status::InvalidArgument(at + ": step " + std::to_string(step) + " has " +
                                           std::to_string(ws.is_array() ? ws.size() : 0) + " workers, the scenario " +
                                           std::to_string(workers));
    }
    if (step != last_step + 1) {
      return core::Status::InvalidArgument(at + ": step " + std::to_string(step) + " follows step " +
                                           std::to_string(last_step) + " (log every step: output.log_every: 1)");
    }
    for (const auto& w : ws) {
      const int r = w.is_object() && w.contains("worker") && w["worker"].is_number_integer() ? w["worker"].get<int>() : -1;
      if (r < 0 || r >= workers || !w.contains("compute_s") || !w["compute_s"].is_number()) {
        return core::Status::InvalidArgument(at + ": a worker without its rank or compute_s");
      }
      const double total = w["compute_s"].get<double>();
      const auto rr = static_cast<size_t>(r);
      if (total < before[rr]) {
        return core::Status::InvalidArgument(at + ": worker " + std::to_string(r) + "'s compute_s went back");
      }
      trace.seconds[rr].push_back(total - before[rr]);
      before[rr] = total;
    }
    last_step = step;
    for (const auto& s : trace.seconds) {
      if (static_cast<int64_t>(s.size()) != step) {
        return core::Status::InvalidArgument(at + ": a worker appears twice or not at all");
      }
    }
  }
  if (last_step < steps) {
    return core::Status::InvalidArgument(where + ": has " + std::to_string(last_step) + " steps; the run takes " +
                                         std::to_string(steps));
  }
  return trace;
}

}  // namespace narrows::trainer
