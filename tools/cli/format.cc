#include "tools/cli/format.h"

#include <cmath>
#include <cstdio>

namespace narrows::tools {

std::string Printf(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string Bytes(double b) {
  if (b >= 1e9) return Printf("%.2f GB", b / 1e9);
  if (b >= 1e6) return Printf("%.1f MB", b / 1e6);
  return Printf("%.0f kB", b / 1e3);
}

std::string BytesOrDash(double b) { return std::isnan(b) ? std::string("-") : Bytes(b); }

std::string Bandwidth(double bits_per_s) {
  if (bits_per_s >= 1e9) return Printf("%g Gbit/s", bits_per_s / 1e9);
  if (bits_per_s >= 1e6) return Printf("%g Mbit/s", bits_per_s / 1e6);
  return Printf("%g kbit/s", bits_per_s / 1e3);
}

std::string Seconds(double s) {
  const double a = std::abs(s);
  if (a >= 10 || a == 0) return Printf("%.1f", s);
  if (a >= 1) return Printf("%.2f", s);
  if (a >= 0.1) return Printf("%.3f", s);
  return Printf("%.3g", s);
}

std::string Duration(double seconds) {
  if (seconds < 120) return Printf("%.1f s", seconds);
  if (seconds < 2 * 3600) return Printf("%.1f min", seconds / 60);
  if (seconds < 2 * 86400) return Printf("%.1f h", seconds / 3600);
  return Printf("%.1f d", seconds / 86400);
}

std::string Si(double v, const char* unit) {
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  if (!std::isfinite(v)) return "never";
  int i = 0;
  while (std::abs(v) >= 999.5 && i < 6) {  // 999.5 prints as 1e+03 at three digits: the next prefix
    v /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %s%s", v, prefixes[i], unit);
  return buf;
}

}  // namespace narrows::tools
