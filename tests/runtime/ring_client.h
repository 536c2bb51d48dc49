// A function process's side of a GPU session, written by hand for the API server's tests: the
// hello, then records on the ring exactly as a test builds them (hostile ones included).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "phos/ipc/control.h"
#include "phos/ipc/ring.h"
#include "phos/ipc/wire.h"

namespace phos::runtime::testing {

class RingClient {
 public:
  RingClient() = default;
  RingClient(const RingClient&) = delete;
  RingClient& operator=(const RingClient&) = delete;
  ~RingClient() {
    ring_.reset();
    if (sock_ >= 0) close(sock_);
  }

  // Says hello on `socket_path` with `token`; false (and a test failure) when refused.
  bool Connect(const std::string& socket_path, const std::string& token) {
    auto sock = ipc::ConnectSeqpacket(socket_path);
    if (!sock.ok()) {
      ADD_FAILURE() << sock.status().ToString();
      return false;
    }
    sock_ = *sock;
    ipc::Hello hello = ipc::MakeHello(token, getpid());
    if (!ipc::SendDatagram(sock_, &hello, sizeof(hello)).ok()) return false;
    ipc::Answer answer;
    int ring_fd = -1;
    auto n = ipc::ReceiveDatagram(sock_, &answer, sizeof(answer), &ring_fd);
    if (!n.ok() || !ipc::CheckAnswer(&answer, *n).ok()) {
      ADD_FAILURE() << "hello refused";
      return false;
    }
    auto ring = ipc::Ring::Attach(ring_fd);
    if (!ring.ok()) {
      ADD_FAILURE() << ring.status().ToString();
      return false;
    }
    ring_ = std::move(*ring);
    return true;
  }

  // One call, waited for: the result; the reply's bytes in reply().
  int32_t Call(ipc::Op op, const void* args, size_t args_bytes, const void* tail = nullptr,
               size_t tail_bytes = 0) {
    const uint64_t seq = ++seq_;
    auto alive = [] { return true; };
    EXPECT_TRUE(ring_->Write(op, ipc::kFlagReply, seq, args, args_bytes, tail, tail_bytes, alive).ok());
    EXPECT_TRUE(ring_->WaitCompleted(seq, alive).ok());
    const ipc::ReplyHeader& header = ring_->reply_header();
    reply_.assign(ring_->reply_payload(), ring_->reply_payload() + header.length);
    return header.result;
  }
  // An argument record passed as itself (a pointer, or nullptr, takes the overload above).
  template <typename Args>
    requires(!std::is_pointer_v<Args> && !std::is_null_pointer_v<Args>)
  int32_t Call(ipc::Op op, const Args& args, const void* tail = nullptr, size_t tail_bytes = 0) {
    return Call(op, &args, sizeof(args), tail, tail_bytes);
  }
  // The reply of the last call, as a T (zeros when it was shorter).
  template <typename T>
  T Reply() const {
    T out{};
    std::memcpy(&out, reply_.data(), std::min(sizeof(T), reply_.size()));
    return out;
  }
  const std::vector<uint8_t>& reply() const { return reply_; }

  // Sends a module image in chunks that fit a record, as the frontend does.
  bool SendModule(uint64_t id, const std::vector<uint8_t>& image, bool is_fatbin = false) {
    const size_t chunk = ring_->max_payload() - sizeof(ipc::ModuleChunkArgs);
    for (size_t offset = 0; offset < image.size(); offset += chunk) {
      const size_t len = std::min(chunk, image.size() - offset);
      ipc::ModuleChunkArgs a{.module_id = id,
                             .total_bytes = image.size(),
                             .offset = offset,
                             .is_fatbin = is_fatbin ? 1u : 0u,
                             .pad = 0};
      if (Call(ipc::Op::kModuleChunk, a, image.data() + offset, len) != 0) return false;
    }
    return true;
  }
  // The session's id of a kernel (kFunctionGet); 0 when not found.
  uint64_t Function(const std::string& name, uint64_t module_id = 0) {
    ipc::FunctionGetArgs a{module_id, static_cast<uint32_t>(name.size()), 0};
    if (Call(ipc::Op::kFunctionGet, a, name.data(), name.size()) != 0) return 0;
    return Reply<ipc::FunctionInfo>().function;
  }
  // A module global's address and size (kModuleGlobalGet); the result.
  int32_t Global(const std::string& name, ipc::GlobalInfo* out, uint64_t module_id = 0) {
    ipc::FunctionGetArgs a{module_id, static_cast<uint32_t>(name.size()), 0};
    int32_t r = Call(ipc::Op::kModuleGlobalGet, a, name.data(), name.size());
    *out = Reply<ipc::GlobalInfo>();
    return r;
  }
  // Device memory (kMemAlloc); 0 when refused.
  uint64_t Alloc(uint64_t bytes) {
    ipc::SizeArgs a{bytes};
    return Call(ipc::Op::kMemAlloc, a) == 0 ? Reply<uint64_t>() : 0;
  }
  int32_t Upload(uint64_t dst, const void* data, uint64_t bytes) {
    ipc::CopyArgs a{dst, 0, bytes, 0};
    return Call(ipc::Op::kMemcpyHtoD, a, data, bytes);
  }
  // `bytes` of device memory, or an empty vector when the copy is refused.
  std::vector<uint8_t> Download(uint64_t src, uint64_t bytes) {
    ipc::CopyArgs a{0, src, bytes, 0};
    if (Call(ipc::Op::kMemcpyDtoH, a) != 0) return {};
    return reply_;
  }

  ipc::Ring& ring() { return *ring_; }

 private:
  int sock_ = -1;
  std::unique_ptr<ipc::Ring> ring_;
  uint64_t seq_ = 0;
  std::vector<uint8_t> reply_;
};

inline std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::vector<uint8_t> bytes;
  if (f == nullptr) return bytes;
  uint8_t buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), f)) > 0;)
    bytes.insert(bytes.end(), buffer, buffer + n);
  std::fclose(f);
  return bytes;
}

}  // namespace phos::runtime::testing
