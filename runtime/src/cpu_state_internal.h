// Shared by the CPU-state backends (cpu_state_fork.cc, cpu_state_criu.cc).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "phos/base/status.h"

namespace phos::runtime::cpu_state_internal {

// Makes this process a child subreaper, once: instances orphaned at birth become its children.
Status BecomeSubreaper();

struct CommandOutcome {
  int exit_code = -1;  // -1 when ended by a signal (or killed at the timeout)
  std::string output;  // standard output and standard error, interleaved
};

// Runs argv (argv[0] searched in PATH) with `inherit_fd`, when >= 0, as the child's descriptor 3;
// kills it after `timeout`.
Result<CommandOutcome> RunCommand(const std::vector<std::string>& argv, int inherit_fd,
                                  std::chrono::milliseconds timeout);

}  // namespace phos::runtime::cpu_state_internal
