#include "core/progress.h"

#include <algorithm>

#include <unistd.h>

#include <cmath>

namespace narrows::core {

std::string FormatDuration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

bool Progress::IsTerminal(std::FILE* f) { return ::isatty(::fileno(f)) == 1; }

Progress::Progress(std::string label, int64_t total, std::FILE* out, Style style)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      interactive_(style == Style::kRedrawOnTerminal && out != nullptr && IsTerminal(out)) {}

std::string Progress::Line(int64_t done, const std::string& detail) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / done : 0.0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s %lld/%lld | %s elapsed | ETA %s", label_.c_str(),
                static_cast<long long>(done), static_cast<long long>(total_),
                FormatDuration(elapsed).c_str(), FormatDuration(eta).c_str());
  return detail.empty() ? buf : std::string(buf) + " | " + detail;
}

void Progress::Update(int64_t done, const std::string& detail) {
  if (!out_) return;
  done = std::min(done, total_);  // asynchronous workers may step past the run's steps per worker
  const auto now = std::chrono::steady_clock::now();
  if (interactive_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
    last_draw_ = now;
    std::fprintf(out_, "\r\033[K%s", Line(done, detail).c_str());
    std::fflush(out_);
    return;
  }
  const int64_t tenth = std::max<int64_t>(1, total_ / 10);
  if (done / tenth != last_printed_ / tenth || (done == total_ && last_printed_ != total_)) {
    last_printed_ = done;
    std::fprintf(out_, "%s\n", Line(done, detail).c_str());
    std::fflush(out_);
  }
}

void Progress::Finish(const std::string& detail) {
  if (!out_) return;
  if (interactive_) {
    std::fprintf(out_, "\r\033[K%s\n", Line(total_, detail).c_str());
  } else if (last_printed_ != total_) {
    std::fprintf(out_, "%s\n", Line(total_, detail).c_str());
  }
  std::fflush(out_);
}

}  // namespace narrows::core
