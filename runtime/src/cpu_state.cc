#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "cpu_state_internal.h"

extern char** environ;

namespace phos::runtime::cpu_state_internal {

Status BecomeSubreaper() {
  static std::once_flag once;
  static Status status;
  std::call_once(once, [] {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
      status = Status::FromErrno(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  });
  return status;
}

Result<CommandOutcome> RunCommand(const std::vector<std::string>& argv, int inherit_fd,
                                  std::chrono::milliseconds timeout) {
  if (argv.empty()) return Status::InvalidArgument("empty command");
  // A memfd rather than a pipe: a restored process may keep criu's descriptors, and nobody has to
  // drain the output while the command runs.
  int out_fd = memfd_create("phos-command-output", MFD_CLOEXEC);
  if (out_fd < 0) return Status::FromErrno(errno, "memfd_create");
  std::vector<std::string> storage = argv;
  std::vector<char*> args;
  for (std::string& a : storage) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDERR_FILENO);
  if (inherit_fd >= 0) posix_spawn_file_actions_adddup2(&actions, inherit_fd, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigset_t all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, storage[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    close(out_fd);
    return Status::Unavailable("run '" + argv[0] + "': " + std::strerror(rc));
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  bool timed_out = false;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      close(out_fd);
      return Status::FromErrno(errno, "wait for '" + argv[0] + "'");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CommandOutcome outcome;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  off_t size = lseek(out_fd, 0, SEEK_END);
  outcome.output.resize(size > 0 ? static_cast<size_t>(size) : 0);
  if (size > 0 && pread(out_fd, outcome.output.data(), outcome.output.size(), 0) != size)
    outcome.output.clear();
  close(out_fd);
  if (timed_out) {
    return Status::Timeout("'" + argv[0] + "' did not finish within " + std::to_string(timeout.count()) +
                           " ms; output: " + outcome.output);
  }
  return outcome;
}

}  // namespace phos::runtime::cpu_state_internal
