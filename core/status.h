// Status and Result<T>: expected failures as values.
//
// A testbed meets failure as a matter of course (a peer gone, a timeout, a bad scenario file), so
// functions that can fail for reasons outside the program return a Status or a Result<T> instead of
// throwing, the way LevelDB returns Status. Broken invariants are not Status: they abort via
// NARROWS_CHECK (core/check.h). Thread-safety: values, no shared state.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/check.h"

namespace narrows::core {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // user input is wrong: a scenario file, a command line, a frame
  kNotFound,          // a file or a key that should exist does not
  kIoError,           // the operating system refused a read or a write
  kTimeout,           // an operation did not finish within its deadline
  kPeerUnavailable,   // the other side left, crashed or never came
  kAborted,           // the operation was cancelled
  kInternal,          // a failure inside a library we call
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status PeerUnavailable(std::string m) { return {StatusCode::kPeerUnavailable, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    NARROWS_CHECK(!status_.ok()) << "a Result built from a Status must carry an error";
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & {
    NARROWS_CHECK(ok()) << status_.ToString();
    return *value_;
  }
  const T& value() const& {
    NARROWS_CHECK(ok()) << status_.ToString();
    return *value_;
  }
  T&& value() && {
    NARROWS_CHECK(ok()) << status_.ToString();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace narrows::core

// Returns from the enclosing function if the expression yields a non-OK Status.
#define NARROWS_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    ::narrows::core::Status narrows_status_ = (expr);     \
    if (!narrows_status_.ok()) return narrows_status_;    \
  } while (0)
