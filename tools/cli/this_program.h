// The path of the running narrows program, for the commands that start more of it (`launch`'s
// workers, `sweep --jobs`' points). Linux: /proc/self/exe.
#pragma once

#include <string>

#include "core/status.h"

namespace narrows::tools {

// IoError where /proc/self/exe cannot be read.
core::Result<std::string> ThisProgram();

}  // namespace narrows::tools
