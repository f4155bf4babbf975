// Progress: one status line for a long loop. On a terminal it rewrites itself in place
// ("step 120/400 | 15.2k tok/s | loss 2.134 | ETA 0:45"); otherwise it prints a plain line
// about every tenth of the way, so logs stay readable. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace narrows::core {

class Progress {
 public:
  // kRedrawOnTerminal rewrites the line in place when `out` is a terminal; kPlainLines never does.
  enum class Style { kRedrawOnTerminal, kPlainLines };
  // `out` is usually stderr; null prints nothing.
  Progress(std::string label, int64_t total, std::FILE* out, Style style = Style::kRedrawOnTerminal);
  // `done` of `total` finished; `detail` is appended after the rate and ETA.
  void Update(int64_t done, const std::string& detail);
  void Finish(const std::string& detail);
  static bool IsTerminal(std::FILE* f);

 private:
  std::string Line(int64_t done, const std::string& detail) const;

  std::string label_;
  int64_t total_;
  std::FILE* out_;
  bool interactive_;
  int64_t last_printed_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1:02:03" or "4:05".
std::string FormatDuration(double seconds);

}  // namespace narrows::core
