// The frontend's GPU session: connects to phosd on the first CUDA call (PHOS_GPU_SOCKET,
// PHOS_INSTANCE_TOKEN), then sends every call as a ring record (docs/remoting.md). One per
// process; the application's threads serialise on its mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda.h>

#include "phos/ipc/ring.h"
#include "phos/ipc/wire.h"

namespace phos::frontend {

// A module image waiting to be (or already) sent to the server.
struct PendingModule {
  uint64_t id;
  const uint8_t* image;
  size_t size;
  bool is_fatbin;
  bool sent = false;
};

// The calling thread's device (cudaSetDevice; cudart_api.cc).
int ThreadDevice();

class Client {
 public:
  static Client& Get();

  // Sends a record. With `reply`, waits for the server and copies up to out_cap reply bytes to
  // `out` (their count to *out_len); the result is the call's, or (take_async_error) the pending
  // asynchronous error of an earlier call, which this takes. Without `reply`, returns CUDA_SUCCESS once queued.
  // CUDA_ERROR_NOT_INITIALIZED-class errors when there is no session.
  CUresult Call(ipc::Op op, const void* args, size_t args_len, const void* data, size_t data_len, bool reply,
                void* out = nullptr, size_t out_cap = 0, size_t* out_len = nullptr, bool take_async_error = true);
  // The pending asynchronous error; `take` clears it.
  CUresult AsyncError(bool take);
  // Queues a module for the server (sent now when connected, else at connection).
  uint64_t AddModule(const void* image, size_t size, bool is_fatbin);
  // Forgets module `id` (cuModuleUnload): it is not sent again to a new session.
  void ForgetModule(uint64_t id);
  // Sends modules not yet sent. Caller holds no lock.
  CUresult FlushModules();
  size_t max_payload();
  size_t reply_capacity();
  // In a forked child: forgets the inherited session (closing the child's copies of its ring and
  // socket only) so that the next call connects anew; registered modules are sent again then.
  void DropInheritedSession();
  // Which session the virtual handles this process holds belong to: it moves when a forked child
  // drops its inherited session.
  uint64_t session_generation() const { return generation_.load(); }
  // The session's ring, connecting first; null without a session. For the host-function thread
  // (cudart_host_functions.cc), which uses only the ring's host-function queues and so must not
  // wait for the mutex an application thread holds across a synchronous call.
  ipc::Ring* HostFnRing();
  // Destroys virtual stream `vid` with the next call of any thread: a thread's default streams
  // when it exits, where taking the mutex could wait for another thread's call.
  void DestroyStreamLater(uint64_t vid);

 private:
  Client() = default;
  CUresult ConnectLocked();
  CUresult SendLocked(ipc::Op op, uint16_t flags, const void* args, size_t args_len, const void* data, size_t data_len,
                      uint64_t* seq);
  CUresult FlushModulesLocked();
  // Sends the destructions DestroyStreamLater deferred.
  CUresult FlushDeferredLocked();
  bool Alive() const;

  std::mutex mu_;
  bool tried_ = false;
  CUresult connect_error_ = CUDA_SUCCESS;
  int sock_ = -1;
  std::unique_ptr<ipc::Ring> ring_;
  uint64_t seq_ = 0;
  // The session device the server executes calls on: a call from a thread whose device differs
  // is preceded by an asynchronous kSetDevice record (the ring keeps them in order).
  int server_device_ = 0;
  uint64_t next_module_id_ = 0;
  std::vector<PendingModule> modules_;
  std::atomic<uint64_t> generation_{0};
  std::mutex deferred_mu_;               // not mu_: taken by exiting threads
  std::vector<uint64_t> deferred_destroys_;
  std::atomic<bool> has_deferred_{false};
};

}  // namespace phos::frontend
