#include "client.h"

#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "cudart_internal.h"
#include "phos/base/log.h"
#include "phos/ipc/control.h"

namespace phos::frontend {

Client& Client::Get() {
  // Never destroyed: static destructors of the application may still make CUDA calls.
  static Client* client = new Client();
  return *client;
}

bool Client::Alive() const {
  pollfd p{sock_, POLLIN, 0};
  // The server sends nothing after its answer: readable or hung up means it closed the session.
  return poll(&p, 1, 0) == 0;
}

CUresult Client::ConnectLocked() {
  if (tried_) return connect_error_;
  tried_ = true;
  const char* path = std::getenv("PHOS_GPU_SOCKET");
  const char* token = std::getenv("PHOS_INSTANCE_TOKEN");
  if (path == nullptr || token == nullptr) {
    PHOS_LOG(Error, "frontend",
             "PHOS_GPU_SOCKET and PHOS_INSTANCE_TOKEN are not both set: this CUDA runtime executes every call in phosd "
             "(run the program with phos-fn run)");
    return connect_error_ = CUDA_ERROR_NO_DEVICE;
  }
  Result<int> sock = ipc::ConnectSeqpacket(path);
  if (!sock.ok()) {
    PHOS_LOG(Error, "frontend", "cannot reach phosd: {}", sock.status().message());
    return connect_error_ = CUDA_ERROR_NO_DEVICE;
  }
  sock_ = *sock;
  ipc::Hello hello = ipc::MakeHello(token, getpid());
  ipc::Answer answer{};
  int ring_fd = -1;
  Status s = ipc::SendDatagram(sock_, &hello, sizeof(hello));
  if (s.ok()) {
    Result<size_t> n = ipc::ReceiveDatagram(sock_, &answer, sizeof(answer), &ring_fd);
    s = n.ok() ? ipc::CheckAnswer(&answer, *n) : n.status();
  }
  if (s.ok() && ring_fd < 0) s = Status::Internal("phosd accepted the session without a ring");
  if (s.ok()) {
    Result<std::unique_ptr<ipc::Ring>> ring = ipc::Ring::Attach(ring_fd);
    ring_fd = -1;
    if (ring.ok()) {
      ring_ = std::move(*ring);
    } else {
      s = ring.status();
    }
  }
  if (ring_fd >= 0) close(ring_fd);
  if (!s.ok()) {
    PHOS_LOG(Error, "frontend", "GPU session with phosd at {} failed: {}", path, s.message());
    close(sock_);
    sock_ = -1;
    return connect_error_ = CUDA_ERROR_NO_DEVICE;
  }
  PHOS_LOG(Debug, "frontend", "GPU session open with phosd at {}", path);
  return FlushModulesLocked();
}

CUresult Client::SendLocked(ipc::Op op, uint16_t flags, const void* args, size_t args_len, const void* data,
                            size_t data_len, uint64_t* seq) {
  *seq = ++seq_;
  Status s = ring_->Write(op, flags, *seq, args, args_len, data, data_len, [this] { return Alive(); });
  if (!s.ok()) {
    PHOS_LOG_EVERY_SEC(Error, "frontend", 10, "call failed: {}", s.message());
    return s.code() == StatusCode::kInvalidArgument ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  return CUDA_SUCCESS;
}

CUresult Client::Call(ipc::Op op, const void* args, size_t args_len, const void* data, size_t data_len, bool reply,
                      void* out, size_t out_cap, size_t* out_len, bool take_async_error) {
  std::lock_guard lock(mu_);
  if (CUresult r = ConnectLocked(); r != CUDA_SUCCESS) return r;
  if (has_deferred_.load()) {
    if (CUresult r = FlushDeferredLocked(); r != CUDA_SUCCESS) return r;
  }
  uint64_t seq = 0;
  if (int device = ThreadDevice(); op != ipc::Op::kSetDevice && device != server_device_) {
    ipc::DeviceArgs d{device, 0};
    if (CUresult r = SendLocked(ipc::Op::kSetDevice, 0, &d, sizeof(d), nullptr, 0, &seq); r != CUDA_SUCCESS) return r;
    server_device_ = device;
  }
  if (CUresult r = SendLocked(op, reply ? ipc::kFlagReply : 0, args, args_len, data, data_len, &seq); r != CUDA_SUCCESS) {
    return r;
  }
  if (!reply) return CUDA_SUCCESS;
  Status s = ring_->WaitCompleted(seq, [this] { return Alive(); });
  if (!s.ok()) {
    PHOS_LOG_EVERY_SEC(Error, "frontend", 10, "call failed: {}", s.message());
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
  }
  OrderAfterHostFunctions();
  const ipc::ReplyHeader& rh = ring_->reply_header();
  if (op == ipc::Op::kSetDevice && rh.result == 0 && args_len == sizeof(ipc::DeviceArgs)) {
    server_device_ = static_cast<const ipc::DeviceArgs*>(args)->device;
  }
  if (out != nullptr && out_cap != 0) {
    size_t n = std::min<size_t>(rh.length, out_cap);
    std::memcpy(out, ring_->reply_payload(), n);
    if (out_len != nullptr) *out_len = n;
  }
  // A synchronising call reports an earlier asynchronous call's error first, as CUDA does.
  int32_t pending = take_async_error ? ring_->header()->async_error.exchange(0) : 0;
  if (pending != 0) return static_cast<CUresult>(pending);
  return static_cast<CUresult>(rh.result);
}

CUresult Client::AsyncError(bool take) {
  std::lock_guard lock(mu_);
  if (ring_ == nullptr) return CUDA_SUCCESS;
  auto& word = ring_->header()->async_error;
  return static_cast<CUresult>(take ? word.exchange(0) : word.load());
}

uint64_t Client::AddModule(const void* image, size_t size, bool is_fatbin) {
  std::lock_guard lock(mu_);
  uint64_t id = ++next_module_id_;
  modules_.push_back({id, static_cast<const uint8_t*>(image), size, is_fatbin});
  if (ring_ != nullptr) FlushModulesLocked();
  return id;
}

void Client::ForgetModule(uint64_t id) {
  std::lock_guard lock(mu_);
  std::erase_if(modules_, [id](const PendingModule& m) { return m.id == id; });
}

CUresult Client::FlushModules() {
  std::lock_guard lock(mu_);
  if (CUresult r = ConnectLocked(); r != CUDA_SUCCESS) return r;
  return FlushModulesLocked();
}

CUresult Client::FlushModulesLocked() {
  size_t chunk = ring_->max_payload() - sizeof(ipc::ModuleChunkArgs);
  for (PendingModule& m : modules_) {
    if (m.sent) continue;
    m.sent = true;
    for (size_t offset = 0; offset < m.size; offset += chunk) {
      size_t n = std::min(chunk, m.size - offset);
      ipc::ModuleChunkArgs a{m.id, m.size, offset, m.is_fatbin ? 1u : 0u, 0};
      uint64_t seq;
      if (CUresult r = SendLocked(ipc::Op::kModuleChunk, 0, &a, sizeof(a), m.image + offset, n, &seq); r != CUDA_SUCCESS) {
        return r;
      }
    }
  }
  return CUDA_SUCCESS;
}

CUresult Client::FlushDeferredLocked() {
  std::vector<uint64_t> vids;
  {
    std::lock_guard lock(deferred_mu_);
    vids.swap(deferred_destroys_);
    has_deferred_.store(false);
  }
  for (uint64_t vid : vids) {
    ipc::HandleArgs a{vid};
    uint64_t seq = 0;
    // Asynchronous: an error is the session's sticky error, as for any stream destruction.
    if (CUresult r = SendLocked(ipc::Op::kStreamDestroy, 0, &a, sizeof(a), nullptr, 0, &seq); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

void Client::DestroyStreamLater(uint64_t vid) {
  std::lock_guard lock(deferred_mu_);
  deferred_destroys_.push_back(vid);
  has_deferred_.store(true);
}

ipc::Ring* Client::HostFnRing() {
  std::lock_guard lock(mu_);
  return ConnectLocked() == CUDA_SUCCESS ? ring_.get() : nullptr;
}

size_t Client::max_payload() {
  std::lock_guard lock(mu_);
  return ConnectLocked() == CUDA_SUCCESS ? ring_->max_payload() : 0;
}

size_t Client::reply_capacity() {
  std::lock_guard lock(mu_);
  return ConnectLocked() == CUDA_SUCCESS ? ring_->reply_capacity() : 0;
}

void Client::DropInheritedSession() {
  std::lock_guard lock(mu_);
  ring_.reset();
  if (sock_ >= 0) close(sock_);
  sock_ = -1;
  tried_ = false;
  connect_error_ = CUDA_SUCCESS;
  seq_ = 0;
  server_device_ = 0;
  for (PendingModule& m : modules_) m.sent = false;
  generation_.fetch_add(1);
  std::lock_guard deferred(deferred_mu_);
  deferred_destroys_.clear();  // streams of the session dropped
  has_deferred_.store(false);
}

}  // namespace phos::frontend
