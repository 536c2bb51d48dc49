#include "phos/base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <string_view>

#include "phos/base/unique_fd.h"

extern char** environ;

namespace phos {
namespace {

using Clock = std::chrono::steady_clock;

// Descriptors a spawn opens for itself, closed on every return path.
using OwnedFds = std::vector<UniqueFd>;

// The posix_spawn attribute and file-action objects, destroyed on every return path.
class SpawnObjects {
 public:
  SpawnObjects() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  SpawnObjects(const SpawnObjects&) = delete;
  SpawnObjects& operator=(const SpawnObjects&) = delete;
  ~SpawnObjects() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
};

// This process's environment without `unset` and without the names `set` gives, then `set`.
std::vector<std::string> ChildEnvironment(const SpawnOptions& options) {
  std::map<std::string, std::string> set;
  std::vector<std::string> set_order;
  for (const auto& [name, value] : options.env) {
    if (set.count(name) == 0) set_order.push_back(name);
    set[name] = value;
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string name(entry.substr(0, entry.find('=')));
    if (set.count(name) != 0) continue;
    if (std::find(options.unset_env.begin(), options.unset_env.end(), name) != options.unset_env.end())
      continue;
    env.emplace_back(entry);
  }
  for (const std::string& name : set_order) env.push_back(name + "=" + set[name]);
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The descriptors the child gets, with stdout_file and stderr_to_stdout resolved into mappings.
Result<std::vector<FdMapping>> ChildDescriptors(const SpawnOptions& options, OwnedFds* owned) {
  std::vector<FdMapping> fds = options.fds;
  auto maps_to = [&fds](int child_fd) {
    return std::find_if(fds.begin(), fds.end(),
                        [child_fd](const FdMapping& m) { return m.child_fd == child_fd; });
  };
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].parent_fd < 0 || fds[i].child_fd < 0) {
      return Status::InvalidArgument("spawn: negative descriptor in mapping " +
                                     std::to_string(fds[i].parent_fd) + " -> " +
                                     std::to_string(fds[i].child_fd));
    }
    if (maps_to(fds[i].child_fd) != fds.begin() + static_cast<std::ptrdiff_t>(i)) {
      return Status::InvalidArgument("spawn: child descriptor " + std::to_string(fds[i].child_fd) +
                                     " given twice");
    }
  }
  if (!options.stdout_file.empty()) {
    if (maps_to(STDOUT_FILENO) != fds.end())
      return Status::InvalidArgument("spawn: both stdout_file and a descriptor 1 given");
    int fd = open(options.stdout_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno(errno, "open " + options.stdout_file);
    fds.push_back({owned->emplace_back(fd).get(), STDOUT_FILENO});
  }
  if (options.stderr_to_stdout) {
    if (maps_to(STDERR_FILENO) != fds.end())
      return Status::InvalidArgument("spawn: both stderr_to_stdout and a descriptor 2 given");
    auto out = maps_to(STDOUT_FILENO);
    fds.push_back({out == fds.end() ? STDOUT_FILENO : out->parent_fd, STDERR_FILENO});
  }
  return fds;
}

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int wait_status) {
  ExitStatus s;
  if (WIFEXITED(wait_status)) s.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) s.signal = WTERMSIG(wait_status);
  return s;
}

std::string ExitStatus::ToString() const {
  if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exited with code " + std::to_string(exit_code);
}

Result<Subprocess> Subprocess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) return Status::InvalidArgument("spawn: empty argv");
  const std::string& program = options.argv[0];
  OwnedFds owned;
  Result<std::vector<FdMapping>> fds = ChildDescriptors(options, &owned);
  if (!fds.ok()) return fds.status().WithContext("spawn '" + program + "'");
  int max_target = STDERR_FILENO;
  for (const FdMapping& m : *fds) max_target = std::max(max_target, m.child_fd);

  SpawnObjects spawn;
  bool maps_stdin = false;
  for (const FdMapping& m : *fds) maps_stdin |= m.child_fd == STDIN_FILENO;
  if (options.stdin_null && !maps_stdin)
    posix_spawn_file_actions_addopen(&spawn.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Each source is first copied above every target number, so that no dup2 overwrites a source a
  // later dup2 still reads (a mapping 3 -> 4 beside 4 -> 3). dup2 onto another number clears
  // close-on-exec in the child.
  for (const FdMapping& m : *fds) {
    int copy = fcntl(m.parent_fd, F_DUPFD_CLOEXEC, max_target + 1);
    if (copy < 0) {
      return Status::FromErrno(errno, "spawn '" + program + "': descriptor " + std::to_string(m.parent_fd) +
                                          " for the child's " + std::to_string(m.child_fd));
    }
    posix_spawn_file_actions_adddup2(&spawn.actions, owned.emplace_back(copy).get(), m.child_fd);
  }
  for (int fd = STDERR_FILENO + 1; fd <= max_target; ++fd) {
    bool mapped =
        std::any_of(fds->begin(), fds->end(), [fd](const FdMapping& m) { return m.child_fd == fd; });
    // glibc ignores closing a descriptor that is not open.
    if (!mapped) posix_spawn_file_actions_addclose(&spawn.actions, fd);
  }
  posix_spawn_file_actions_addclosefrom_np(&spawn.actions, max_target + 1);

  // phosd blocks SIGINT/SIGTERM and ignores SIGPIPE; a child must not inherit either.
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (options.own_process_group) flags |= POSIX_SPAWN_SETPGROUP;
  posix_spawnattr_setflags(&spawn.attr, flags);
  posix_spawnattr_setpgroup(&spawn.attr, 0);
  posix_spawnattr_setsigmask(&spawn.attr, &none);
  posix_spawnattr_setsigdefault(&spawn.attr, &all);

  std::vector<std::string> arg_storage = options.argv;
  std::vector<std::string> env_storage = ChildEnvironment(options);
  std::vector<char*> argv = Pointers(arg_storage);
  std::vector<char*> envp = Pointers(env_storage);
  pid_t pid = -1;
  int rc = program.find('/') == std::string::npos
               ? posix_spawnp(&pid, program.c_str(), &spawn.actions, &spawn.attr, argv.data(), envp.data())
               : posix_spawn(&pid, program.c_str(), &spawn.actions, &spawn.attr, argv.data(), envp.data());
  if (rc != 0) return Status::Unavailable("spawn '" + program + "': " + std::strerror(rc));
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) {
    Status s = Status::FromErrno(errno, "spawn '" + program + "': pidfd_open");
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return s;
  }
  return Subprocess(pid, pidfd, options.own_process_group);
}

Result<Subprocess> Subprocess::Adopt(pid_t pid, bool leads_group) {
  if (pid <= 0) return Status::InvalidArgument("adopt: invalid pid " + std::to_string(pid));
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) return Status::FromErrno(errno, "adopt pid " + std::to_string(pid));
  // Only a child can be reaped; said now rather than at the first wait.
  siginfo_t info{};
  int rc;
  do {
    rc = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    Status s = Status::FromErrno(errno, "adopt pid " + std::to_string(pid) + ": not a child of this process");
    ClosePidfd(pidfd);
    return s;
  }
  return Subprocess(pid, pidfd, leads_group);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      leads_group_(other.leads_group_),
      exit_(std::exchange(other.exit_, std::nullopt)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Close();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    leads_group_ = other.leads_group_;
    exit_ = std::exchange(other.exit_, std::nullopt);
  }
  return *this;
}

Subprocess::~Subprocess() {
  Close();
}

void Subprocess::Close() {
  if (running()) {
    Signal(SIGKILL).IgnoreError();
    Reap(/*kill_group=*/true).status().IgnoreError();
  }
  if (pidfd_ >= 0) ClosePidfd(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
}

Result<bool> Subprocess::PollEnded(std::optional<std::chrono::milliseconds> timeout) const {
  const Clock::time_point deadline = timeout ? Clock::now() + *timeout : Clock::time_point::max();
  while (true) {
    int wait_ms = -1;
    if (timeout) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
    }
    pollfd p{pidfd_, POLLIN, 0};
    int ready = poll(&p, 1, wait_ms);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR)
      return Status::FromErrno(errno, "poll pidfd of pid " + std::to_string(pid_));
    if (ready == 0 && wait_ms == 0) return false;
  }
}

Result<ExitStatus> Subprocess::Reap(bool kill_group) {
  // The ended process is still a zombie here, so its pid cannot name another group yet.
  if (kill_group && leads_group_) kill(-pid_, SIGKILL);
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Status::FromErrno(errno, "reap pid " + std::to_string(pid_));
  exit_ = ExitStatus::FromWaitStatus(status);
  return *exit_;
}

Result<ExitStatus> Subprocess::Wait() {
  if (!running()) return Status::FailedPrecondition("wait: no running process");
  Result<bool> ended = PollEnded(std::nullopt);
  if (!ended.ok()) return ended.status();
  return Reap(/*kill_group=*/false);
}

Result<ExitStatus> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (!running()) return Status::FailedPrecondition("wait: no running process");
  Result<bool> ended = PollEnded(timeout);
  if (!ended.ok()) return ended.status();
  if (!*ended) {
    return Status::Timeout("pid " + std::to_string(pid_) + " still running after " +
                           std::to_string(timeout.count()) + " ms");
  }
  return Reap(/*kill_group=*/false);
}

Status Subprocess::Signal(int signal) {
  if (!running()) return Status::Ok();
  // A process that has not yet made itself its group's leader (a fork template's instance, just
  // forked) has no group to signal: the process itself is signalled as well.
  if (leads_group_ && kill(-pid_, signal) != 0 && errno != ESRCH)
    return Status::FromErrno(errno, "signal group " + std::to_string(pid_));
  if (PidfdSendSignal(pidfd_, signal) != 0 && errno != ESRCH)
    return Status::FromErrno(errno, "signal pid " + std::to_string(pid_));
  return Status::Ok();
}

Result<ExitStatus> Subprocess::Stop(std::chrono::milliseconds grace, int first_signal) {
  if (pid_ <= 0) return Status::FailedPrecondition("stop: no process");
  if (exit_) return *exit_;
  if (first_signal != 0) PHOS_RETURN_IF_ERROR(Signal(first_signal));
  Result<bool> ended = PollEnded(grace);
  if (!ended.ok()) return ended.status();
  if (!*ended) {
    PHOS_RETURN_IF_ERROR(Signal(SIGKILL));
    ended = PollEnded(std::nullopt);
    if (!ended.ok()) return ended.status();
  }
  return Reap(/*kill_group=*/true);
}

pid_t Subprocess::Release() {
  pid_t pid = pid_;
  if (pidfd_ >= 0) ClosePidfd(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
  exit_.reset();
  return pid;
}

// glibc 2.36 has wrappers in <sys/pidfd.h>, older ones do not; the system calls are the same.
int PidfdOpen(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

int PidfdSendSignal(int pidfd, int signal) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

// Kept a frame of its own in every build, so that a suppression can name it.
__attribute__((noinline)) void ClosePidfd(int pidfd) {
  close(pidfd);
}

Result<CommandOutput> RunCommand(SpawnOptions options, std::optional<std::chrono::milliseconds> timeout) {
  const std::string program = options.argv.empty() ? "" : options.argv[0];
  if (!options.stdout_file.empty())
    return Status::InvalidArgument("run '" + program + "': stdout_file given");
  OwnedFds owned;
  int out_fd = memfd_create("phos-command-output", MFD_CLOEXEC);
  if (out_fd < 0) return Status::FromErrno(errno, "run '" + program + "': memfd_create");
  options.fds.push_back({owned.emplace_back(out_fd).get(), STDOUT_FILENO});
  PHOS_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(options));
  Result<ExitStatus> ended = timeout ? child.Wait(*timeout) : child.Wait();
  bool timed_out = !ended.ok() && ended.status().code() == StatusCode::kTimeout;
  if (timed_out) ended = child.Stop(std::chrono::milliseconds(0), SIGKILL);
  if (!ended.ok()) return ended.status().WithContext("run '" + program + "'");

  CommandOutput result{*ended, ""};
  off_t size = lseek(out_fd, 0, SEEK_END);
  result.output.resize(size > 0 ? static_cast<size_t>(size) : 0);
  if (size > 0 && pread(out_fd, result.output.data(), result.output.size(), 0) != size) result.output.clear();
  if (timed_out) {
    return Status::Timeout("'" + program + "' did not finish within " + std::to_string(timeout->count()) +
                           " ms; output: " + result.output);
  }
  return result;
}

}  // namespace phos
