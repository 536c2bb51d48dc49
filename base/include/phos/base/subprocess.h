// Child processes: spawn with an exact set of descriptors and environment, wait with a timeout,
// end a process and its group. Every process phos, its tests and its benchmarks start (function
// instances, criu, phosd under test, tools, benchmark clients) goes through Subprocess; the SDK's
// fork template forks itself and is not such a spawn.
//
//   SpawnOptions o;
//   o.argv = {"/usr/bin/criu", "check"};
//   o.fds = {{channel_fd, 3}};
//   PHOS_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(o));
//   PHOS_ASSIGN_OR_RETURN(ExitStatus how, child.Wait(std::chrono::seconds(60)));
//
// Waiting uses a pidfd (Linux >= 5.3) and poll: no sleeping loop, no SIGCHLD handler.
// A Subprocess destroyed while its process runs kills the process (and its group) and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos {

// How a process ended.
struct ExitStatus {
  int exit_code = -1;  // when it exited; -1 when killed by a signal
  int signal = 0;      // the signal that killed it; 0 when it exited

  static ExitStatus FromWaitStatus(int wait_status);
  bool exited() const { return signal == 0; }
  bool success() const { return signal == 0 && exit_code == 0; }
  // The shell's convention: the exit code, or 128 + the signal.
  int ShellCode() const { return signal == 0 ? exit_code : 128 + signal; }
  // "exited with code 0", "killed by signal 9 (Killed)".
  std::string ToString() const;
};

// A descriptor of this process given to the child under the number `child_fd`.
struct FdMapping {
  int parent_fd = -1;
  int child_fd = -1;
};

struct SpawnOptions {
  // The program and its arguments; argv[0] is searched in PATH when it has no slash. Required.
  std::vector<std::string> argv;
  // Variables set in the child on top of this process's environment, replacing those of the same
  // name; a later entry wins over an earlier one. Default: none.
  std::vector<std::pair<std::string, std::string>> env;
  // Variables of this process's environment the child does not get. Default: none.
  std::vector<std::string> unset_env;
  // Descriptors the child gets. Descriptors 0-2 not listed are inherited (see stdin_null and
  // stdout_file); every other descriptor of this process is closed in the child. Default: none.
  std::vector<FdMapping> fds;
  // Standard input from /dev/null rather than inherited (unless fds gives a descriptor 0).
  // Default: true.
  bool stdin_null = true;
  // When not empty, standard output is appended to this file (created with mode 0644) instead of
  // inherited. Default: "".
  std::string stdout_file;
  // Standard error goes where standard output goes. Default: false (inherited, or fds' 2).
  bool stderr_to_stdout = false;
  // The child leads a new process group (its pgid is its pid), which Signal and Stop signal as a
  // whole. Default: true.
  bool own_process_group = true;
};

// One owner at a time (movable, not copyable); not for concurrent use from several threads.
class Subprocess {
 public:
  // Starts `options.argv`. The child starts with no signal blocked and every signal at its
  // default disposition, whatever this process blocks or ignores.
  static Result<Subprocess> Spawn(const SpawnOptions& options);
  // Takes over `pid`, a child of this process started some other way (a process reparented to
  // this child subreaper, or one given up by Release). `leads_group`: it leads its own process
  // group, which is then signalled too.
  static Result<Subprocess> Adopt(pid_t pid, bool leads_group);

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills and reaps a process still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // True until the process has been reaped (by Wait or Stop).
  bool running() const { return pid_ > 0 && !exit_.has_value(); }
  // How it ended, once reaped.
  const std::optional<ExitStatus>& exit_status() const { return exit_; }

  // Waits for the process to end and reaps it.
  Result<ExitStatus> Wait();
  // Waits up to `timeout`; Timeout when the process is still running then (it keeps running).
  Result<ExitStatus> Wait(std::chrono::milliseconds timeout);
  // Sends `signal` to the process, and to its group when it leads one. A process already ended
  // (reaped or not) is no error.
  Status Signal(int signal);
  // Ends the process: sends `first_signal` (0: none, the process is expected to exit by itself),
  // waits up to `grace`, then sends SIGKILL; whatever is left in its group is killed too, before
  // the process is reaped (its pid, and so its group id, cannot be reused until then).
  Result<ExitStatus> Stop(std::chrono::milliseconds grace, int first_signal = SIGTERM);
  // Gives the process up without ending it: the caller is to reap it (Adopt takes it back).
  pid_t Release();

 private:
  Subprocess(pid_t pid, int pidfd, bool leads_group) : pid_(pid), pidfd_(pidfd), leads_group_(leads_group) {}
  // Polls the pidfd up to `timeout` (nullopt: forever); true when the process has ended.
  Result<bool> PollEnded(std::optional<std::chrono::milliseconds> timeout) const;
  // Reaps the ended process; with `kill_group`, first kills what is left of its group.
  Result<ExitStatus> Reap(bool kill_group);
  void Close();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool leads_group_ = false;
  std::optional<ExitStatus> exit_;
};

// What a command run to its end printed.
struct CommandOutput {
  ExitStatus status;
  std::string output;  // standard output (and standard error with stderr_to_stdout)
};

// Runs `options` to its end with its standard output captured (options.stdout_file must be empty
// and fds must not give a descriptor 1). The output goes to an anonymous memory file rather than
// a pipe: nobody has to drain it while the command runs, and a descendant that keeps the
// descriptor does not keep the caller waiting. After `timeout` (nullopt: none) the command is
// killed with its group, and the result is Timeout carrying the output so far.
Result<CommandOutput> RunCommand(SpawnOptions options, std::optional<std::chrono::milliseconds> timeout);

// The pidfd system calls (Linux >= 5.3), for processes that are no children of the caller too (an
// instance in a sandbox's PID namespace): -1 with errno on failure.
int PidfdOpen(pid_t pid);
int PidfdSendSignal(int pidfd, int signal);
// Closes a descriptor from PidfdOpen. Every pidfd is closed here: ThreadSanitizer does not see a
// pidfd made (it is a raw system call), so it takes the close for a race with whichever thread
// last used that descriptor number, and its suppressions name this function
// (scripts/sanitizers/thread.supp).
void ClosePidfd(int pidfd);

}  // namespace phos
