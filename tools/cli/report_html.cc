// The report page's HTML (tools/cli/report_command.h RenderReport): the report's data as JSON, with
// Chart.js, the page's script and its style inlined, so the file opens offline.
#include "tools/cli/report_command.h"

#include <string>

namespace narrows::tools {

// Generated at build time from tools/cli/report/ and Debian's Chart.js (tools/cli/CMakeLists.txt).
extern const char kReportChartJs[];
extern const char kReportPageJs[];
extern const char kReportPageCss[];

using json = nlohmann::json;

namespace {

std::string EscapeHtml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON inside <script>: "</" would end the element.
std::string ScriptSafe(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') out += "\\";
  }
  return out;
}

}  // namespace

std::string RenderReport(const json& report) {
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>";
  html += EscapeHtml(report.value("title", "narrows report"));
  html += "</title>\n<style>\n";
  html += kReportPageCss;
  html += "</style>\n<script>\n";
  html += kReportChartJs;
  html += "\n</script>\n</head>\n<body>\n<div id=\"report\"></div>\n";
  html += "<script type=\"application/json\" id=\"report-data\">";
  html += ScriptSafe(report.dump());
  html += "</script>\n<script>\n";
  html += kReportPageJs;
  html += "\n</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace narrows::tools
