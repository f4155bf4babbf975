// The report's building blocks as data (drawn in the browser by tools/cli/report/report.js), and its
// two kinds of section: a run folder's and a sweep folder's.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/cli/run_folders.h"

namespace narrows::tools::page {

using json = nlohmann::json;

inline json Axis(const std::string& label, bool log = false) { return {{"label", label}, {"log", log}}; }

inline json Series(const std::string& label, json points, const std::string& style = "line") {
  return {{"label", label}, {"points", std::move(points)}, {"style", style}};
}

inline json LineChart(const std::string& id, const std::string& title, json x, json y, json series) {
  return {{"type", "chart"}, {"kind", "line"}, {"id", id}, {"title", title},
          {"x", std::move(x)}, {"y", std::move(y)}, {"series", std::move(series)}};
}

inline json Table(const std::string& title, std::vector<std::string> columns, json rows) {
  return {{"type", "table"}, {"title", title}, {"columns", std::move(columns)}, {"rows", std::move(rows)}};
}

inline json Text(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

// The comparison of every entry of every run (loss, bytes, utilisation), then one section per run.
json ComparisonSection(const std::vector<Run>& runs);
json RunSection(const Run& run, int index);
// A sweep's table of points, heat maps of speed-up, loss curves along a numeric axis and fits.
json SweepSection(const Sweep& sweep, int index);

}  // namespace narrows::tools::page
