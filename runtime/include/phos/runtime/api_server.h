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
  // Create the node communicator at start (ctxpool::CommunicatorPool), from which the NCCL
  // communicators functions ask for are split. Without it, or when the driver table has no NCCL
  // (logged), functions' NCCL calls are refused. Default: true.
  bool communicators = true;
};

class ApiServer {
 public:
  // Initialises the driver (cuInit) and starts listening. `driver` must outlive the server.
  static Result<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options, DriverTable* driver);
  // Ends every session and stops listening.
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // A fresh token (128-bit hex) that one frontend connection may present to open a session.
  std::string IssueToken();
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
