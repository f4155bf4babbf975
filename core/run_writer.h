// Run folders: the files a run leaves behind, written so that a crash loses at most the line being
// written and never corrupts what was there.
//
// WriteFileAtomic writes to a temporary file beside the target, fsyncs it and renames it over the
// target. JsonlWriter appends one JSON object per line and flushes each line. Not thread-safe.
#pragma once

#include <cstdio>
#include <string>

#include "core/status.h"

namespace narrows::core {

// Creates `dir` and its parents if needed.
Status MakeDirs(const std::string& dir);
Status WriteFileAtomic(const std::string& path, const std::string& content);

class JsonlWriter {
 public:
  JsonlWriter() = default;
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Truncates `path` and opens it for appending lines.
  Status Open(const std::string& path);
  // REQUIRES: Open() succeeded. `json` is one serialised object without a newline.
  Status Append(const std::string& json);
  void Close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace narrows::core
