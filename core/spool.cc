#include "core/spool.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/run_writer.h"

namespace narrows::core {

static_assert(std::is_trivially_copyable_v<StepRecord>, "a StepRecord is spooled as its bytes");

namespace {

// Appends the whole items of type T that `bytes` holds, each spooled as its bytes.
template <typename T>
void AppendItems(const std::string& bytes, std::vector<T>* out) {
  for (size_t at = 0; at + sizeof(T) <= bytes.size(); at += sizeof(T)) {
    T item;
    std::memcpy(&item, bytes.data() + at, sizeof item);
    out->push_back(item);
  }
}

}  // namespace

core::Result<std::unique_ptr<Spool>> Spool::Open(const std::string& dir, const std::string& stem) {
  NARROWS_RETURN_IF_ERROR(core::MakeDirs(dir));
  auto fail = [](const std::string& path) {
    return core::Status::IoError(path + ": cannot create the spool file (" + std::strerror(errno) + ")");
  };
  // The records file is locked before it is given its name, so that no gatherer ever sees it
  // unlocked while this process lives; every name is created exclusively, so that a dead process's
  // spool under the same name (its PID used again) is never overwritten: the next free name is
  // taken instead.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = attempt == 0 ? stem : stem + "-" + std::to_string(attempt);
    std::unique_ptr<Spool> s(new Spool());  // its destructor removes what an attempt created
    s->events_.path = dir + "/" + name + ".events.jsonl";
    s->rates_.path = dir + "/" + name + ".rates";
    const std::string named = dir + "/" + name + ".records", unnamed = dir + "/." + name + ".records.new";
    s->records_.path = unnamed;
    s->records_.fd = ::open(unnamed.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->records_.fd < 0) return fail(unnamed);
    // On an error, `s` going removes the files this attempt created, the unnamed one included.
    if (::flock(s->records_.fd, LOCK_EX | LOCK_NB) != 0) {
      return core::Status::IoError(unnamed + ": cannot lock the spool file (" + std::strerror(errno) + ")");
    }
    bool taken = false;
    for (File* file : {&s->events_, &s->rates_}) {
      file->fd = ::open(file->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (file->fd < 0 && errno != EEXIST) return fail(file->path);
      taken = taken || file->fd < 0;
    }
    if (!taken && ::link(unnamed.c_str(), named.c_str()) != 0) {
      if (errno != EEXIST) return fail(named);
      taken = true;
    }
    ::unlink(unnamed.c_str());
    if (!taken) {
      s->records_.path = named;
      s->dir_ = dir;
      return s;
    }
    // Another spool has this name: the files this attempt created go, and the next name is tried.
    ::close(s->records_.fd);
    s->records_.fd = -1;
  }
  return core::Status::IoError(dir + "/" + stem + ": 100 spools of that name are already there");
}

Spool::~Spool() {
  // Unlinked before closed: the lock on the records file is held until its name is gone.
  for (File* file : {&events_, &rates_, &records_}) {
    if (file->fd < 0) continue;
    ::unlink(file->path.c_str());
    ::close(file->fd);
  }
  if (!dir_.empty()) ::rmdir(dir_.c_str());  // once the last process of this machine closed its spool
}

bool Spool::Write(File& file, const void* data, size_t bytes) {
  if (failed_) return false;
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(file.fd, static_cast<const char*>(data) + done, bytes - done, file.size + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      why_ = file.path + ": cannot append (" + std::strerror(n < 0 ? errno : ENOSPC) + "); records kept in memory from there on";
      return false;  // a partial item may lie past `size`, where nothing reads
    }
    done += static_cast<size_t>(n);
  }
  file.size += static_cast<off_t>(bytes);
  return true;
}

core::Result<std::string> Spool::Contents(const File& file) const {
  std::string bytes(static_cast<size_t>(file.size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(file.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return core::Status::IoError(file.path + ": cannot read the spool back (" + (n < 0 ? std::strerror(errno) : "shorter than written") + ")");
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

void Spool::Add(const StepRecord& r) {
  if (!Write(records_, &r, sizeof r)) kept_records_.push_back(r);
}

void Spool::Add(const nlohmann::json& event) {
  const std::string line = event.dump() + "\n";
  if (!Write(events_, line.data(), line.size())) kept_events_.push_back(event);
}

void Spool::AddRate(double seconds_per_flop) {
  if (!Write(rates_, &seconds_per_flop, sizeof seconds_per_flop)) kept_rates_.push_back(seconds_per_flop);
}

core::Status Spool::Read(std::vector<StepRecord>* records, std::vector<nlohmann::json>* events, std::vector<double>* rates) {
  core::Status status = failed_ ? core::Status::IoError(why_) : core::Status::Ok();
  auto note = [&](const core::Status& s) {
    if (status.ok()) status = s;
  };
  if (auto bytes = Contents(records_); bytes.ok()) {
    AppendItems(*bytes, records);
  } else {
    note(bytes.status());
  }
  if (auto bytes = Contents(rates_); bytes.ok()) {
    AppendItems(*bytes, rates);
  } else {
    note(bytes.status());
  }
  if (auto bytes = Contents(events_); bytes.ok()) {
    size_t at = 0;
    for (size_t end; (end = bytes->find('\n', at)) != std::string::npos; at = end + 1) {
      try {
        events->push_back(nlohmann::json::parse(bytes->begin() + static_cast<std::ptrdiff_t>(at),
                                                bytes->begin() + static_cast<std::ptrdiff_t>(end)));
      } catch (const std::exception& e) {
        note(core::Status::IoError(events_.path + ": an unreadable line (" + e.what() + ")"));
      }
    }
  } else {
    note(bytes.status());
  }
  records->insert(records->end(), kept_records_.begin(), kept_records_.end());
  events->insert(events->end(), kept_events_.begin(), kept_events_.end());
  rates->insert(rates->end(), kept_rates_.begin(), kept_rates_.end());
  return status;
}

std::vector<Spool::Leftover> Spool::TakeLeftovers(const std::string& dir) {
  std::vector<std::string> stems;
  if (DIR* d = ::opendir(dir.c_str())) {
    const std::string suffix = ".records";
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("process-", 0) != 0 || name.size() <= suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      stems.push_back(name.substr(0, name.size() - suffix.size()));
    }
    ::closedir(d);
  }
  std::sort(stems.begin(), stems.end());
  std::vector<Leftover> out;
  for (const std::string& stem : stems) {
    std::unique_ptr<Spool> s(new Spool());
    s->dir_ = dir;
    s->records_.path = dir + "/" + stem + ".records";
    s->records_.fd = ::open(s->records_.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (s->records_.fd < 0) continue;  // its process removed it a moment ago
    // A process holds the lock on its records file while it lives, whatever its PID became since:
    // a lock that is taken means a dead writer. One that ended normally unlinked its files first.
    struct stat st {};
    if (::flock(s->records_.fd, LOCK_EX | LOCK_NB) != 0 || ::fstat(s->records_.fd, &st) != 0 || st.st_nlink == 0) {
      ::close(s->records_.fd);
      s->records_.fd = -1;
      continue;
    }
    s->records_.size = st.st_size;
    Leftover l;
    l.stem = stem;
    for (auto [file, suffix] : {std::pair{&s->events_, ".events.jsonl"}, {&s->rates_, ".rates"}}) {
      file->path = dir + "/" + stem + suffix;
      file->fd = ::open(file->path.c_str(), O_RDONLY | O_CLOEXEC);
      if (file->fd >= 0 && ::fstat(file->fd, &st) == 0) file->size = st.st_size;
    }
    // Whole items only: a kill can cut the last one short.
    s->records_.size -= s->records_.size % static_cast<off_t>(sizeof(StepRecord));
    s->rates_.size -= s->rates_.size % static_cast<off_t>(sizeof(double));
    l.status = s->Read(&l.records, &l.events, &l.rates);
    out.push_back(std::move(l));
  }  // each spool's destructor removes its files
  return out;
}

}  // namespace narrows::core
