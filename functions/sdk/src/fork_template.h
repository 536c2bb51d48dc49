// The function side of the fork template and of CRIU restore (the fork, forked and adopt frames
// of phos/ipc/instance_channel.h). Private to the SDK's serve loop.
#pragma once

#include <string_view>

#include "phos/base/status.h"

namespace phos::fn::detail {

// What a fork frame left the calling process as.
struct ForkOutcome {
  bool in_child = false;  // true only in the new process
  int channel_fd = -1;    // the new process's channel (in_child), `ready` already sent on it
};

// What the process a fork makes is for.
enum class ForkRole {
  kInstance,  // a fork frame: a new instance, adopting the frame's session variables
  kTemplate,  // a checkpoint frame: this instance's state kept as a new template
};

// Handles a fork frame (kInstance) on the template's channel `channel_fd`, or a checkpoint frame
// (kTemplate) on an instance's. `passed_fd` (owned) is the new process's end of its channel. This
// process answers `forked <pid>` or, when it cannot be forked (threads of its own, live GPU
// allocations a fork frame's session would not restore, host functions pending, a malformed
// frame), `error` with the reason, and returns in_child false. The new process closes
// `channel_fd`, becomes its own process group, drops the GPU session it inherited (a new instance
// adopts the session variables of the frame, a new template none), announces `ready` on its
// channel and returns in_child true. An error is returned only when `channel_fd` itself broke.
Result<ForkOutcome> HandleFork(int channel_fd, std::string_view payload, int passed_fd, ForkRole role);

// Takes the session variables of a fork or adopt frame (PHOS_INSTANCE_TOKEN required) into the
// environment and has the frontend, if loaded, drop the GPU session this process inherited.
Status AdoptSession(std::string_view payload);

// Has the frontend, if loaded, drop the GPU session this process inherited and forget its token,
// without taking another: a template made by a checkpoint, whose forks adopt their own.
Status DetachSession();

// Threads of this process now (/proc/self/task).
Result<int> CountThreads();

}  // namespace phos::fn::detail
