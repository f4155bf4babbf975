// Running another program and reading what it prints: the Slurm commands a sweep submits with
// (sbatch, squeue). No shell: the arguments go as they are.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace narrows::tools {

struct ProcessOutput {
  int exit_code = -1;  // -1 where it ended by a signal
  std::string output;  // its stdout and stderr together
};

// Runs argv[0] (looked up on PATH) with the rest as its arguments and waits for it; NotFound where
// the program is not on PATH, IoError where it cannot be started.
core::Result<ProcessOutput> RunCapturing(const std::vector<std::string>& argv);

// `text` quoted for a POSIX shell ('...', with ' written '\'').
std::string ShellQuote(const std::string& text);

}  // namespace narrows::tools
