#include "tools/cli/this_program.h"

#include <unistd.h>

namespace narrows::tools {

core::Result<std::string> ThisProgram() {
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return core::Status::IoError("cannot find this program (/proc/self/exe)");
  self[len] = '\0';
  return std::string(self);
}

}  // namespace narrows::tools
