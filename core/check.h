// NARROWS_CHECK: abort loudly, with file:line, when an invariant of the program is broken.
//
// For bugs only. Anything a user, a file or a peer can cause is a Status (core/status.h).
//   NARROWS_CHECK(n > 0) << "n=" << n;
#pragma once

#include <sstream>

namespace narrows::core::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace narrows::core::internal

#define NARROWS_CHECK(condition) \
  if (condition) {               \
  } else                         \
    ::narrows::core::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()
