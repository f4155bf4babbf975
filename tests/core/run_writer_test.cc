// WriteFileAtomic, which every checkpoint, summary and model file goes through: a full disk (here a
// file-size limit) or a SIGKILL in the middle of a write leaves the previous file whole, and the
// error names the file.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/run_writer.h"

namespace narrows::core {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int Leftovers(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp-") != std::string::npos;
  return n;
}

class WriteFileAtomicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("narrows_atomic_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(WriteFileAtomicTest, AFullDiskKeepsThePreviousFileAndNamesIt) {
  const std::string path = (dir_ / "rank-0.ckpt").string();
  ASSERT_TRUE(WriteFileAtomic(path, "the previous checkpoint").ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A file-size limit fails the write as a full disk does (EFBIG instead of ENOSPC).
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const Status s = WriteFileAtomic(path, std::string(1 << 20, 'x'));
    const bool named = s.message().find(path) != std::string::npos;
    ::_exit(s.ok() ? 1 : named ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the write succeeded past the limit; 2: the error did not name the file";
  EXPECT_EQ(Read(path), "the previous checkpoint");
  EXPECT_EQ(Leftovers(dir_), 0) << "a partial temporary was left on the full disk";
}

// A writer killed at random moments: the file is always one whole version, never a mix or a stub.
TEST_F(WriteFileAtomicTest, ASigkillMidWriteLeavesAWholeVersion) {
  const std::string path = (dir_ / "summary.json").string();
  const size_t size = 4 << 20;
  ASSERT_TRUE(WriteFileAtomic(path, std::string(size, 'a')).ok());
  for (int round = 0; round < 8; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (int i = 0;; ++i) {
        const Status written = WriteFileAtomic(path, std::string(size, i % 2 == 0 ? 'b' : 'a'));
        if (!written.ok()) ::_exit(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 7 * round));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    const std::string got = Read(path);
    ASSERT_EQ(got.size(), size) << "round " << round;
    EXPECT_TRUE(got == std::string(size, 'a') || got == std::string(size, 'b')) << "round " << round << ": a mix";
  }
}

}  // namespace
}  // namespace narrows::core
