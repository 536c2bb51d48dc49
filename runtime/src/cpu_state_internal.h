// Shared by the CPU-state backends (cpu_state_fork.cc, cpu_state_criu.cc).
#pragma once

#include "phos/base/status.h"

namespace phos::runtime::cpu_state_internal {

// Makes this process a child subreaper, once: instances orphaned at birth become its children.
Status BecomeSubreaper();

}  // namespace phos::runtime::cpu_state_internal
