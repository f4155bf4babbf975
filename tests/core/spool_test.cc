// The spool of a long deployment's records (core/spool.h): what is added comes back in order,
// reading does not consume it, a file-size limit loses nothing, and what a killed process spooled
// is taken up afterwards.
#include "core/spool.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace narrows::core {
namespace {

std::string Folder(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("narrows-spool-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

StepRecord Rec(int64_t step) { return {static_cast<int>(step % 3), step, 0.5 * step, 4.0 - 0.01 * step, 1, 2, 3, step * 10, step * 20}; }

TEST(SpoolTest, ASpoolThatCannotBeLockedIsAnErrorAndLeavesNoFileOfItsAttempt) {
  const std::string dir = Folder("locked");
  std::filesystem::create_directories(dir);
  const std::string unnamed = dir + "/.p.records.new";
  const int held = ::open(unnamed.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  auto spool = Spool::Open(dir, "p");
  ASSERT_FALSE(spool.ok());
  EXPECT_NE(spool.status().message().find("cannot lock the spool file"), std::string::npos) << spool.status().message();
  for (const char* name : {"/.p.records.new", "/p.records", "/p.events.jsonl", "/p.rates"}) {
    EXPECT_FALSE(std::filesystem::exists(dir + name)) << name;
  }
  ::close(held);
  std::filesystem::remove_all(dir);
}

TEST(SpoolTest, GivesBackWhatWasAddedInOrderAndKeepsIt) {
  const std::string dir = Folder("order");
  {
    auto spool = Spool::Open(dir, "p");
    ASSERT_TRUE(spool.ok()) << spool.status().message();
    for (int64_t s = 0; s < 100; ++s) {
      (*spool)->Add(Rec(s));
      (*spool)->AddRate(1e-9 * static_cast<double>(s + 1));
      if (s % 10 == 0) (*spool)->Add(nlohmann::json{{"type", "outer_sync"}, {"step", s}, {"note", "a\nb"}});
    }
    std::vector<StepRecord> records;
    std::vector<nlohmann::json> events;
    std::vector<double> rates;
    ASSERT_TRUE((*spool)->Read(&records, &events, &rates).ok());
    ASSERT_EQ(records.size(), 100u);
    ASSERT_EQ(rates.size(), 100u);
    ASSERT_EQ(events.size(), 10u);
    EXPECT_EQ(records[42].step, 42);
    EXPECT_EQ(records[42].bytes_received, 840);
    EXPECT_DOUBLE_EQ(records[42].loss, 4.0 - 0.42);
    EXPECT_DOUBLE_EQ(rates[99], 1e-7);
    EXPECT_EQ(events[3].at("step"), 30);
    EXPECT_EQ(events[3].at("note"), "a\nb");
    // Reading does not consume: more is appended after what was read, and all of it comes back.
    (*spool)->Add(Rec(100));
    records.clear();
    events.clear();
    rates.clear();
    ASSERT_TRUE((*spool)->Read(&records, &events, &rates).ok());
    ASSERT_EQ(records.size(), 101u);
    EXPECT_EQ(records[100].step, 100);
    EXPECT_EQ(events.size(), 10u);
    EXPECT_FALSE(std::filesystem::is_empty(dir));
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "closing the last spool removes its files and folder";
}

TEST(SpoolTest, AFileSizeLimitLosesNothing) {
  const std::string dir = Folder("limit");
  auto spool = Spool::Open(dir, "p");
  ASSERT_TRUE(spool.ok()) << spool.status().message();
  // From 1,000 bytes on, writes fail (EFBIG; SIGXFSZ ignored): 13 whole records fit, the 14th is cut.
  struct rlimit old {};
  ::getrlimit(RLIMIT_FSIZE, &old);
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old;
  limit.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  for (int64_t s = 0; s < 40; ++s) (*spool)->Add(Rec(s));
  (*spool)->Add(nlohmann::json{{"type", "after"}, {"step", 40}});
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  std::vector<StepRecord> records;
  std::vector<nlohmann::json> events;
  std::vector<double> rates;
  const core::Status s = (*spool)->Read(&records, &events, &rates);
  EXPECT_EQ(s.code(), core::StatusCode::kIoError);
  EXPECT_NE(s.message().find(".records: cannot append"), std::string::npos) << s.message();
  ASSERT_EQ(records.size(), 40u);
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(records[static_cast<size_t>(i)].step, i);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("type"), "after");
}

// A process killed with its spool open leaves it behind: TakeLeftovers reads its whole items (the
// partial record and the unterminated line a kill can leave are left out) and removes its files; a
// running process's spool (this one's, a live child's) is not taken.
TEST(SpoolTest, AKilledProcesssSpoolIsTakenUpAndALiveOnesIsNot) {
  const std::string dir = Folder("leftover");
  auto mine = Spool::Open(dir, "process-" + std::to_string(::getpid()));
  ASSERT_TRUE(mine.ok());
  (*mine)->Add(Rec(1));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  auto child = [&](int records, bool stay) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto s = Spool::Open(dir, "process-" + std::to_string(::getpid()));
      if (!s.ok()) ::_exit(1);
      for (int i = 0; i < records; ++i) (*s)->Add(Rec(100 + i));
      (*s)->Add(nlohmann::json{{"type", "crash"}, {"step", 7}});
      (*s)->AddRate(2e-9);
      if (!stay) {  // a kill in the middle of the next item
        const std::string path = dir + "/process-" + std::to_string(::getpid());
        FILE* f = std::fopen((path + ".records").c_str(), "ab");
        std::fwrite("partial", 1, 7, f);
        std::fclose(f);
        f = std::fopen((path + ".events.jsonl").c_str(), "ab");
        std::fputs("{\"type\":\"cut", f);
        std::fclose(f);
      }
      const char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(1);
      for (;;) ::pause();  // until killed
    }
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    return pid;
  };
  const pid_t dead = child(5, false), alive = child(3, true);
  ASSERT_GT(dead, 0);
  ASSERT_GT(alive, 0);
  ::kill(dead, SIGKILL);
  ::waitpid(dead, nullptr, 0);
  auto taken = Spool::TakeLeftovers(dir);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].stem, "process-" + std::to_string(dead));
  EXPECT_TRUE(taken[0].status.ok()) << taken[0].status.message();
  ASSERT_EQ(taken[0].records.size(), 5u);
  EXPECT_EQ(taken[0].records[4].step, 104);
  ASSERT_EQ(taken[0].events.size(), 1u);
  EXPECT_EQ(taken[0].events[0].at("type"), "crash");
  EXPECT_EQ(taken[0].rates, std::vector<double>{2e-9});
  EXPECT_FALSE(std::filesystem::exists(dir + "/process-" + std::to_string(dead) + ".records"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/process-" + std::to_string(alive) + ".records"));
  EXPECT_TRUE(Spool::TakeLeftovers(dir).empty());  // taken once
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);
  auto second = Spool::TakeLeftovers(dir);  // now it is dead too
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].records.size(), 3u);
  std::vector<StepRecord> records;
  std::vector<nlohmann::json> events;
  std::vector<double> rates;
  ASSERT_TRUE((*mine)->Read(&records, &events, &rates).ok());  // this process's own is untouched
  EXPECT_EQ(records.size(), 1u);
  ::close(ready[0]);
  ::close(ready[1]);
  mine->reset();
  std::filesystem::remove_all(dir);
}

// The writer's lock, not its PID, says whether a spool is left over: a dead process's spool whose
// name is a live PID (the PID used again since, here this very process's) is taken up, and a spool
// opened under that name afterwards takes another name instead of overwriting it.
TEST(SpoolTest, ADeadWritersSpoolIsTakenThoughItsPidRunsAgain) {
  const std::string dir = Folder("reused");
  const std::string stem = "process-" + std::to_string(::getpid());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto s = Spool::Open(dir, stem);
    if (!s.ok()) ::_exit(1);
    for (int i = 0; i < 4; ++i) (*s)->Add(Rec(200 + i));
    const char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    for (;;) ::pause();  // until killed
  }
  ASSERT_GT(pid, 0);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_TRUE(Spool::TakeLeftovers(dir).empty());  // its writer lives
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  auto mine = Spool::Open(dir, stem);  // the name is a dead process's: not overwritten
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  (*mine)->Add(Rec(1));
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + stem + "-1.records"));
  auto taken = Spool::TakeLeftovers(dir);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].stem, stem);
  ASSERT_EQ(taken[0].records.size(), 4u);
  EXPECT_EQ(taken[0].records[3].step, 203);
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + stem + ".records"));
  std::vector<StepRecord> records;
  std::vector<nlohmann::json> events;
  std::vector<double> rates;
  ASSERT_TRUE((*mine)->Read(&records, &events, &rates).ok());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].step, 1);
  mine->reset();  // a spool closed normally leaves nothing, the folder included
  EXPECT_FALSE(std::filesystem::exists(dir));
  ::close(ready[0]);
  ::close(ready[1]);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace narrows::core
