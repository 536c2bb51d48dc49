/* The fork template's entries into the frontend CUDA runtime (libphos-cudart.so), called by the
 * function SDK's serve loop (functions/sdk) through dlsym, so that functions without CUDA need no
 * frontend. Not an application API.
 *
 * __phosQuiesce: stops the frontend's one thread, which runs host functions (cudaLaunchHostFunc)
 * while any are pending, and returns 0; or, when host functions are still pending, leaves it
 * running and returns how many. A template forks with none: only the calling thread survives.
 *
 * __phosLiveAllocations: the device allocations this process holds now. A template must hold none
 * when it forks: a child would share pointers into a session it cannot reach.
 *
 * __phosForkChild: in a freshly forked child, drops the GPU session inherited from the template
 * (its ring mapping and control socket are closed in the child only: the template's session is
 * untouched) and the kernel handles that session issued, sets PHOS_INSTANCE_TOKEN to `token`, and
 * makes the next CUDA call connect to phosd as a new session, re-sending the registered modules.
 * Returns 0, or -1 when `token` is null or empty.
 *
 * __phosDetachSession: in a freshly forked child that is to be a template (a checkpoint of a
 * running instance), drops the inherited GPU session and the kernel handles it issued as
 * __phosForkChild does, without a session to connect to: the template's own forks call
 * __phosForkChild with theirs. Returns 0. */
#ifndef PHOS_FRONTEND_FORK_CHILD_H_
#define PHOS_FRONTEND_FORK_CHILD_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

size_t __phosQuiesce(void);
size_t __phosLiveAllocations(void);
int __phosForkChild(const char* token);
int __phosDetachSession(void);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_FRONTEND_FORK_CHILD_H_ */
