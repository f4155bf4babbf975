#include "core/run_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace narrows::core {

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(dir + ": cannot create folder: " + ec.message());
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  // A temporary name of this writer's own: processes that write the same file at once (workers of
  // one machine caching a warm start) each rename a complete file into place.
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IoError(tmp + ": " + std::strerror(errno));
  // On any failure (a full disk, a file-size limit) the partial temporary goes and `path` keeps
  // what it held.
  auto fail = [&](const std::string& what) {
    const Status s = Status::IoError(path + ": " + what + " (" + std::strerror(errno) + "); the previous file is kept");
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write " + std::to_string(content.size()) + " bytes");
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("cannot flush");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("cannot close the new file");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("cannot rename the new file into place");
  return Status::Ok();
}

JsonlWriter::~JsonlWriter() { Close(); }

Status JsonlWriter::Open(const std::string& path) {
  Close();
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) return Status::IoError(path + ": " + std::strerror(errno));
  path_ = path;
  return Status::Ok();
}

Status JsonlWriter::Append(const std::string& json) {
  NARROWS_CHECK(file_ != nullptr) << "JsonlWriter::Append before Open";
  if (std::fputs(json.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF || std::fflush(file_) != 0) {
    return Status::IoError(path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

void JsonlWriter::Close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace narrows::core
