// How the command line prints quantities: bytes, bandwidths, durations and SI-prefixed values, in
// one place so that `run`, `report`, `plan` and `sweep` print a number the same way.
#pragma once

#include <string>

namespace narrows::tools {

// "1.23 GB", "45.6 MB", "789 kB" (decimal units).
std::string Bytes(double b);
// Bytes, or "-" when `b` is NaN (a value the run did not record).
std::string BytesOrDash(double b);
// "100 Mbit/s", "10 Gbit/s".
std::string Bandwidth(double bits_per_s);
// Seconds with at least three significant digits and one decimal: "109.0", "16.2", "2.35", "0.0123"
// (so that a table of short times never shows 0.0 beside a ratio of them).
std::string Seconds(double s);
// "45.0 s", "12.5 min", "3.2 h", "2.1 d".
std::string Duration(double seconds);
// Three significant digits with an SI prefix: Si(2.5e9, "FLOP/s") is "2.5 GFLOP/s"; "never" if
// `v` is not finite.
std::string Si(double v, const char* unit);
// `v` through printf's `fmt` (one double conversion).
std::string Printf(const char* fmt, double v);

}  // namespace narrows::tools
