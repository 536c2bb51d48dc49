// The fork template's entries (phos/frontend/fork_child.h): the SDK's serve loop stops the
// host-function thread and asks for live allocations before it forks, and resets the inherited GPU
// session in the child.
#include <cstdlib>

#include "cudart_internal.h"
#include "phos/base/log.h"
#include "phos/frontend/fork_child.h"

extern "C" {

size_t __phosLiveAllocations(void) {
  return phos::frontend::LiveDeviceAllocations();
}

size_t __phosQuiesce(void) {
  return phos::frontend::QuiesceHostFunctions();
}

int __phosDetachSession(void) {
  phos::frontend::Client::Get().DropInheritedSession();
  phos::frontend::ForgetSessionKernels();
  phos::frontend::ForgetSessionDevices();
  return 0;
}

int __phosForkChild(const char* token) {
  if (token == nullptr || token[0] == '\0') {
    PHOS_LOG(Error, "frontend", "fork child: no instance token to reconnect with");
    return -1;
  }
  // connect reads the token from the environment, as in a process phosd spawned.
  setenv("PHOS_INSTANCE_TOKEN", token, 1);
  return __phosDetachSession();
}

}  // extern "C"
