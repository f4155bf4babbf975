// `narrows report`: one self-contained HTML file (opens offline, no server) from run folders and
// sweep folders. The content is built here as data — sections of charts, tables and heat maps —
// and drawn in the browser by Chart.js (Debian's libjs-chart.js, inlined with the page's script).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace narrows::tools {

// The report as data: {"title", "sections": [{"title", "blocks": [...]}]}; a block is a chart
// ({"type": "chart", "kind": "line"|"bar"|"timeline", ...}), a heat map, a table, text or a
// preformatted scenario. A folder with summary.json is a run; one with sweep.json is a sweep.
// `entries`: only these entries of each run (all when empty; a name no run has is an error).
core::Result<nlohmann::json> BuildReport(const std::vector<std::string>& dirs,
                                         const std::vector<std::string>& entries = {});

// The page: `report` embedded as JSON, Chart.js and the page's script inlined.
std::string RenderReport(const nlohmann::json& report);

// Builds and writes the report to `output` ("" = <first folder>/report.html); returns the path.
core::Result<std::string> WriteReport(const std::vector<std::string>& dirs, const std::string& output,
                                      const std::vector<std::string>& entries = {});

}  // namespace narrows::tools
