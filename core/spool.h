// Spool: what a long-running process records as it goes — each step's record, each event, each
// whole step's host rate — appended to files of its own instead of kept in memory, and read back
// when the entry is exported (a live checkpoint, the gather at the end) or finished. A deployment that runs for hours then holds a
// constant amount of memory while it trains (tools/bench/soak measures it); the emulator keeps its
// records in memory (its runs are short and in one process). Torch-free.
//
// Each item is one write(2) at the file's end (no fsync: a crash loses the process's records either
// way, as it loses its memory). When a write fails (a full disk, a file-size limit) the file is read
// up to its last whole item, and that item and every later one are kept in memory instead, so
// nothing recorded is lost; Read says why the spool stopped.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace narrows::core {

struct StepRecord {
  int worker;
  int64_t step;
  double time, loss, compute_s, comm_s, idle_s;
  int64_t bytes_sent, bytes_received;
};

class Spool {
 public:
  // Creates `dir` and three files in it, named by `stem` (records, events, rates), or by `stem`-K
  // where a spool of that name is there already (a dead process's, its PID since used again). The
  // records file is locked (flock) for as long as the spool is open: that lock, not the PID, tells
  // a gatherer whether its writer lives.
  static core::Result<std::unique_ptr<Spool>> Open(const std::string& dir, const std::string& stem);
  ~Spool();  // closes and removes the files, and the folder if no other process's remain
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  void Add(const StepRecord& r);
  void Add(const nlohmann::json& event);
  void AddRate(double seconds_per_flop);

  // Appends everything added so far, in the order added, to the three vectors; the spool keeps it
  // and goes on appending. An error says which file could not be read back, or why the spool
  // stopped writing (then what it could not write was kept and is appended all the same).
  core::Status Read(std::vector<StepRecord>* records, std::vector<nlohmann::json>* events, std::vector<double>* rates);

  // What processes that no longer run left in `dir` (killed before they could hand their records
  // on; a spool is named process-PID): each read as Read reads (whole items; a line cut short by
  // the kill is left out) and its files removed. A spool whose records file is still locked (its
  // process runs, this one included) is left alone; a folder on another machine is not seen.
  struct Leftover {
    std::string stem;  // process-PID, or process-PID-K
    std::vector<StepRecord> records;
    std::vector<nlohmann::json> events;
    std::vector<double> rates;
    core::Status status;  // what could not be read
  };
  static std::vector<Leftover> TakeLeftovers(const std::string& dir);

 private:
  struct File {
    std::string path;
    int fd = -1;
    off_t size = 0;  // bytes of whole items
  };
  Spool() = default;
  // Appends `bytes` to `file`, or cuts it back, stops spooling (the caller keeps the item) and
  // returns false.
  bool Write(File& file, const void* data, size_t bytes);
  // The file's whole items, or an error naming it.
  core::Result<std::string> Contents(const File& file) const;

  std::string dir_;
  File records_, events_, rates_;
  bool failed_ = false;
  std::string why_;
  // What was added after a failed write.
  std::vector<StepRecord> kept_records_;
  std::vector<nlohmann::json> kept_events_;
  std::vector<double> kept_rates_;
};

}  // namespace narrows::core
