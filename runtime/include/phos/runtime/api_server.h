// The API server (docs/remoting.md): executes each function instance's remoted CUDA runtime and
// cuBLAS calls on that instance's own context. One GPU session per instance token: a control
// socket (hello, version, token), a shared-memory call ring, one executor thread consuming the
// ring in order, virtual handles, and a buffer table against which every device pointer a call
// names is checked.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "phos/base/status.h"
#include "phos/ipc/ring.h"
#include "phos/runtime/driver_table.h"

namespace phos::ctxpool {
class CommunicatorPool;
class ContextPool;
}  // namespace phos::ctxpool

namespace phos::runtime {

struct ApiServerOptions {
  // Unix SOCK_SEQPACKET socket to listen on (phosd's gpu.sock); replaced if it exists. Required.
  std::string socket_path;
  // Each session's ring: record bytes (a power of two) and reply-area bytes.
  // Default: ipc::Ring::kDefaultDataBytes, ipc::Ring::kDefaultReplyBytes.
  size_t ring_bytes = ipc::Ring::kDefaultDataBytes;
  size_t reply_bytes = ipc::Ring::kDefaultReplyBytes;
  // The device every session's context is created on. Default: 0.
  int device = 0;
  // The pool every session leases its context from (on `device`); it must outlive the server.
  // nullptr: the server opens a private pool that keeps no context ready (each new session's
  // lease then creates one, and contexts are reused after their scrub). Default: nullptr.
  ctxpool::ContextPool* context_pool = nullptr;
  // The device groups (contexts on devices 0..N-1 plus a communicator over them) that sessions of
  // N >= 2 GPUs lease; it must outlive the server. nullptr: the server opens a private pool that
  // keeps no group ready (a session's lease waits for one to be created) when the driver table
  // has NCCL; without NCCL (logged) sessions of more than one GPU are refused. Default: nullptr.
  ctxpool::CommunicatorPool* device_groups = nullptr;
  // Address space each single-GPU session reserves on its first cudaMalloc: the session's device-0
  // allocations are carved out of it (runtime/va_allocator.h), so that they can be mapped back at
  // the same addresses on restore. 0: sessions allocate with cuMemAlloc instead. Allocations on
  // other devices and in device-group sessions always use cuMemAlloc. Default: 64 GiB.
  uint64_t instance_va_bytes = 64ull << 30;
};

class ApiServer {
 public:
  // Initialises the driver (cuInit) and starts listening. `driver` must outlive the server.
  static Result<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options, DriverTable* driver);
  // Ends every session and stops listening.
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // A fresh token (128-bit hex) that one frontend connection may present to open a session of
  // `gpus` devices: 1 leases a context from the context pool, more a device group (the function's
  // NCCL communicators come from it). More GPUs than the node has: the session's calls fail
  // (CUDA_ERROR_NO_DEVICE, logged). Callers validate `gpus` (FunctionSpec: 1..8).
  std::string IssueToken(int gpus = 1);
  // Ends the token's session, if any, releasing its context, memory, streams, events, modules and
  // handles, and forgets the token. Unknown tokens are ignored.
  void EndSession(const std::string& token);
  // Sessions currently open.
  size_t session_count() const;
  const std::string& socket_path() const;

  class Impl;

 private:
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace phos::runtime
