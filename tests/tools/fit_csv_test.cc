// `narrows fit` on a CSV of points (docs/scaling/points.csv's form), beside tools/fit_test.cc's
// least squares: the rows, folders and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tools/cli/fit_command.h"

namespace narrows::tools {
namespace {

namespace fs = std::filesystem;

class FitCsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("narrows_fitcsv_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

// L = 5 N^-0.1 M^0.02 at three sizes, two worker counts, two seeds (one 1% high, one 1% low), with
// the quoted, comma-holding column export.py writes; a second folder's rows are fitted apart.
TEST_F(FitCsvTest, FitsEachFolderAndEntryFromTheRows) {
  std::ostringstream csv;
  csv.precision(17);
  csv << "folder,params,workers,entry,seed,final_val_loss,tuned_to\n";
  for (double n : {1e4, 4e4, 1.6e5}) {
    for (int m : {1, 4}) {
      for (int seed : {0, 1}) {
        const double loss = 5.0 * std::pow(n, -0.1) * std::pow(m, 0.02) * (seed == 0 ? 1.01 : 0.99);
        csv << "scaling," << n << "," << m << ",ddp," << seed << "," << loss << ",\"{\"\"train.lr\"\": \"\"3e-3\"\", \"\"x\"\": 1}\"\n";
      }
    }
  }
  csv << "scaling-batch64,10000,2,ddp,0,3.1,\"{}\"\n" << "scaling-batch64,40000,2,ddp,0,2.9,\"{}\"\n";
  const std::string path = Write("points.csv", csv.str());
  auto fits = FitSweep(path);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  ASSERT_EQ(fits->size(), 2u);
  EXPECT_EQ((*fits)[0].entry, "scaling/ddp");
  EXPECT_EQ((*fits)[0].points.size(), 12u);
  EXPECT_EQ((*fits)[0].seeds, 2);
  EXPECT_NEAR((*fits)[0].fit.alpha, -0.1, 1e-9);
  EXPECT_NEAR((*fits)[0].fit.beta, 0.02, 1e-9);
  EXPECT_EQ((*fits)[1].entry, "scaling-batch64/ddp");
  // Held out: fitted on the two smaller sizes, the largest predicted at each M (the batch piece has
  // too few sizes and is left out).
  auto held = HoldOutLargest(path);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].params, 1.6e5);
  EXPECT_NEAR((*held)[0].error, 0.0, 1e-4);  // the law itself, up to the seeds' log-mean (1e-4 of it)
  EXPECT_EQ((*held)[0].seeds, 2);
}

TEST_F(FitCsvTest, ABadRowIsNamedByItsLine) {
  auto missing = FitSweep(Write("a.csv", "params,workers,loss\n1,1,1\n"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("a.csv:1: no column 'entry'"), std::string::npos) << missing.status().message();
  auto bad = FitSweep(Write("b.csv", "params,workers,entry,final_val_loss\n1e4,1,ddp,3\n1e5,x,ddp,2\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("b.csv:3: workers 'x' is not a positive number"), std::string::npos)
      << bad.status().message();
  auto short_row = FitSweep(Write("c.csv", "params,workers,entry,final_val_loss\n1e4,1,ddp\n"));
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("c.csv:2: 3 fields, the header has 4"), std::string::npos);
}

}  // namespace
}  // namespace narrows::tools
