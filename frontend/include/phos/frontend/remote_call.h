/* The frontend CUDA runtime's entries for its sibling libraries (libphos-cublas, libphos-nccl). Not
 * an application API.
 *
 * __phosRemoteCall: sends one call of docs/remoting.md's wire format through this process's GPU
 * session. Returns the call's result (a CUresult, or a cublasStatus_t for cuBLAS handle calls);
 * the session's pending asynchronous error is left for the CUDA runtime to report.
 *
 * __phosStreamId: how phosd names `stream`: cudaStreamPerThread is the calling thread's default
 * stream (made on first use), any other stream its own handle. Returns a CUresult.
 *
 * __phosLogNotSupported: logs, once per `call` in the process, that phos does not serve it as
 * called, and why (the refusals of frontend/surface/refused.tsv). */
#ifndef PHOS_FRONTEND_REMOTE_CALL_H_
#define PHOS_FRONTEND_REMOTE_CALL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int __phosRemoteCall(uint16_t op, const void* args, size_t args_len, int want_reply, void* reply, size_t reply_cap);
int __phosStreamId(const void* stream, uint64_t* id);
void __phosLogNotSupported(const char* call, const char* why);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_FRONTEND_REMOTE_CALL_H_ */
