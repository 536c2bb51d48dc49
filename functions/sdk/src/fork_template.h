// The function side of the fork template and of CRIU restore (the fork, forked and adopt frames
// of phos/ipc/instance_channel.h). Private to the SDK's serve loop.
#pragma once

#include <string_view>

#include "phos/base/status.h"

namespace phos::fn::detail {

// What a fork frame left the calling process as.
struct ForkOutcome {
  bool in_child = false;  // true only in the new instance
  int channel_fd = -1;    // the new instance's channel (in_child), `ready` already sent on it
};

// Handles a fork frame on the template's channel `template_fd`. `passed_fd` (owned) is the new
// instance's end of its channel. The template answers `forked <pid>` or, when it cannot be
// forked (threads of its own, live GPU allocations, a malformed frame), `error` with the reason,
// and returns in_child false. The new instance closes the template's channel, becomes its own
// process group, adopts the session variables and returns in_child true. An error is returned
// only when the template's channel itself broke.
Result<ForkOutcome> HandleFork(int template_fd, std::string_view payload, int passed_fd);

// Takes the session variables of a fork or adopt frame (PHOS_INSTANCE_TOKEN required) into the
// environment and has the frontend, if loaded, drop the GPU session this process inherited.
Status AdoptSession(std::string_view payload);

// Threads of this process now (/proc/self/task).
Result<int> CountThreads();

}  // namespace phos::fn::detail
