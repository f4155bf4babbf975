// The command line's number formats (tools/cli/format.h).
#include <gtest/gtest.h>

#include "tools/cli/format.h"

namespace narrows::tools {
namespace {

// Three significant digits under the largest prefix that keeps the number below 1000 as printed:
// a value that rounds up to 1000 takes the next prefix (1 M, not 1e+03 k).
TEST(FormatTest, SiNeverPrintsAThousandOfAPrefix) {
  EXPECT_EQ(Si(842496, "B"), "842 kB");
  EXPECT_EQ(Si(999999, ""), "1 M");
  EXPECT_EQ(Si(999.6, "B"), "1 kB");
  EXPECT_EQ(Si(999.4, "B"), "999 B");
  EXPECT_EQ(Si(1e6, "bit/s"), "1 Mbit/s");
  EXPECT_EQ(Si(-2.5e9, "FLOP"), "-2.5 GFLOP");
  EXPECT_EQ(Si(1e21, "B"), "1e+03 EB");  // beyond the prefixes
}

}  // namespace
}  // namespace narrows::tools
