/* The frontend CUDA runtime's entry for its sibling libraries (libphos-cublas): send one call of
 * docs/remoting.md's wire format through this process's GPU session. Not an application API.
 * Returns the call's result (a CUresult, or a cublasStatus_t for cuBLAS handle calls); the
 * session's pending asynchronous error is left for the CUDA runtime to report. */
#ifndef PHOS_FRONTEND_REMOTE_CALL_H_
#define PHOS_FRONTEND_REMOTE_CALL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int __phosRemoteCall(uint16_t op, const void* args, size_t args_len, int want_reply, void* reply, size_t reply_cap);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_FRONTEND_REMOTE_CALL_H_ */
