#include "trainer/spool.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/run_writer.h"

namespace narrows::trainer {

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
  std::unique_ptr<Spool> s(new Spool());
  s->dir_ = dir;
  for (auto [file, suffix] : {std::pair{&s->records_, ".records"}, {&s->events_, ".events.jsonl"}, {&s->rates_, ".rates"}}) {
    file->path = dir + "/" + stem + suffix;
    file->fd = ::open(file->path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file->fd < 0) return core::Status::IoError(file->path + ": cannot create the spool file (" + std::strerror(errno) + ")");
  }
  return s;
}

Spool::~Spool() {
  for (File* file : {&records_, &events_, &rates_}) {
    if (file->fd < 0) continue;
    ::close(file->fd);
    ::unlink(file->path.c_str());
  }
  ::rmdir(dir_.c_str());  // once the last process of this machine closed its spool
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
      const std::string stem = name.substr(0, name.size() - suffix.size());
      char* end = nullptr;
      const long pid = std::strtol(stem.c_str() + 8, &end, 10);
      if (end == stem.c_str() + 8 || *end != '\0' || pid <= 0 || pid == ::getpid()) continue;
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // it runs (or is not ours to ask)
      stems.push_back(stem);
    }
    ::closedir(d);
  }
  std::sort(stems.begin(), stems.end());
  std::vector<Leftover> out;
  for (const std::string& stem : stems) {
    std::unique_ptr<Spool> s(new Spool());
    s->dir_ = dir;
    Leftover l;
    l.stem = stem;
    for (auto [file, suffix] : {std::pair{&s->records_, ".records"}, {&s->events_, ".events.jsonl"}, {&s->rates_, ".rates"}}) {
      file->path = dir + "/" + stem + suffix;
      file->fd = ::open(file->path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
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

}  // namespace narrows::trainer
