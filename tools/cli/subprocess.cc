#include "tools/cli/subprocess.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

extern char** environ;

namespace narrows::tools {

using core::Status;

namespace {

bool OnPath(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path == nullptr ? "/usr/bin:/bin" : path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (::access(((dir.empty() ? "." : dir) + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

core::Result<ProcessOutput> RunCapturing(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status::Internal("RunCapturing: no program");
  if (!OnPath(argv[0])) return Status::NotFound(argv[0] + " is not on PATH");
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_adddup2(&files, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&files, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&files, pipe_fds[0]);
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, args[0], &files, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  ::close(pipe_fds[1]);
  if (err != 0) {
    ::close(pipe_fds[0]);
    return Status::IoError("cannot start " + argv[0] + ": " + std::strerror(err));
  }
  ProcessOutput out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0) {
      out.output.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace narrows::tools
