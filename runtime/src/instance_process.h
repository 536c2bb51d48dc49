// Starting and ending one function process (private to the instance manager).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/status.h"
#include "phos/runtime/instance_registry.h"
#include "phos/runtime/sandbox.h"

namespace phos::runtime {

struct InstanceProcess {
  pid_t pid = -1;
  int channel_fd = -1;  // phosd's end of the invocation socketpair
  std::string log_path;
};

// Spawns `spec` in its own process group with the function's end of a fresh socketpair as
// PHOS_INVOKE_FD, stdin from /dev/null, stdout and stderr appended to
// <logs_dir>/<name>-<pid>.log, and phosd's environment plus spec.env plus `extra_env`; in the
// function's sandbox when `sandbox` is given (and on). The pid is then that of the sandbox's
// first process, which ends with the function (bubblewrap's --die-with-parent and PID namespace).
Result<InstanceProcess> SpawnInstanceProcess(const FunctionSpec& spec, const std::string& logs_dir,
                                             const std::vector<std::pair<std::string, std::string>>& extra_env,
                                             const Sandbox* sandbox = nullptr);

// The last non-empty line of a function's log (at most its last 4 KiB; bytes other than printable
// ASCII as '?'), or "" when there is none: why a function that exited before its entry point did,
// for the deploy's answer.
std::string LastLogLine(const std::string& log_path);

// Keeps the functions' logs (<logs_dir>/*.log) below about `max_bytes` each: a larger one has its
// last `max_bytes` copied to <log>.1 (replacing the previous part), is emptied in place (its
// writers append, so they go on at its start) and begins again with a line saying so. Output
// written between the copy and the cut is lost, and a function writing faster than the sweeps
// come overshoots by what it writes in between. Returns how many logs were cut.
int BoundFunctionLogs(const std::string& logs_dir, uint64_t max_bytes);

// Waits up to `grace` for the process to exit on its own, then kills its process group, reaps
// it, and returns a description of how it ended (ExitStatus::ToString: "exited with code 0",
// "killed by signal 6 (Aborted)"). The pid must be a child of this process (spawned here, or an
// instance reparented to this child subreaper).
std::string EndInstanceProcess(pid_t pid, std::chrono::milliseconds grace);

}  // namespace phos::runtime
