#include <sys/prctl.h>

#include <cerrno>
#include <mutex>

#include "cpu_state_internal.h"

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

}  // namespace phos::runtime::cpu_state_internal
