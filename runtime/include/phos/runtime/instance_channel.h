// The invocation channel between phosd's instance manager and a function's SDK serve loop
// (docs/remoting.md): a stream socketpair, the function's end passed as PHOS_INVOKE_FD.
//
// Frame: u32 payload length (host byte order: both ends are on one machine), u8 kind, payload.
//   ready     function -> phosd  once, at the serve loop's first wait (the pre-entry point); empty
//   request   phosd -> function  the invocation's body
//   response  function -> phosd  the handler's answer
//   error     function -> phosd  u8 phos::StatusCode, then the message
//
// Header-only on purpose: the SDK, linked into every function, uses it without linking the
// daemon's runtime library.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "phos/base/status.h"

namespace phos::runtime::invoke {

enum class FrameKind : uint8_t { kReady = 1, kRequest = 2, kResponse = 3, kError = 4 };

// A frame larger than this is refused by the reader (a corrupt length must not allocate GiBs).
inline constexpr uint32_t kMaxFramePayload = 256u << 20;
inline constexpr const char* kInvokeFdEnv = "PHOS_INVOKE_FD";

struct Frame {
  FrameKind kind = FrameKind::kReady;
  std::string payload;
};

namespace detail {

inline Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    // send(MSG_NOSIGNAL): a peer that died must give EPIPE, not kill the writer with SIGPIPE.
    ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "invoke channel write");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Reads exactly `size` bytes. `*eof_at_start` is set when the peer closed before the first byte.
inline Status ReadAll(int fd, char* data, size_t size, bool* eof_at_start) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "invoke channel read");
    }
    if (n == 0) {
      if (done == 0 && eof_at_start != nullptr) *eof_at_start = true;
      return Status::Unavailable("invoke channel closed by the peer");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace detail

inline Status WriteFrame(int fd, FrameKind kind, std::string_view payload) {
  if (payload.size() > kMaxFramePayload) {
    return Status::InvalidArgument("invoke frame of " + std::to_string(payload.size()) + " bytes exceeds the " +
                                   std::to_string(kMaxFramePayload) + "-byte limit");
  }
  char header[5];
  uint32_t length = static_cast<uint32_t>(payload.size());
  std::memcpy(header, &length, 4);
  header[4] = static_cast<char>(kind);
  PHOS_RETURN_IF_ERROR(detail::WriteAll(fd, header, sizeof(header)));
  return detail::WriteAll(fd, payload.data(), payload.size());
}

// Reads one frame. A clean close before a frame gives Unavailable with `*closed` set to true.
inline Result<Frame> ReadFrame(int fd, bool* closed = nullptr) {
  if (closed != nullptr) *closed = false;
  char header[5];
  PHOS_RETURN_IF_ERROR(detail::ReadAll(fd, header, sizeof(header), closed));
  uint32_t length = 0;
  std::memcpy(&length, header, 4);
  auto kind = static_cast<uint8_t>(header[4]);
  if (kind < static_cast<uint8_t>(FrameKind::kReady) || kind > static_cast<uint8_t>(FrameKind::kError)) {
    return Status::Corruption("invoke frame of unknown kind " + std::to_string(kind));
  }
  if (length > kMaxFramePayload) {
    return Status::Corruption("invoke frame of " + std::to_string(length) + " bytes exceeds the limit");
  }
  Frame frame;
  frame.kind = static_cast<FrameKind>(kind);
  frame.payload.resize(length);
  PHOS_RETURN_IF_ERROR(detail::ReadAll(fd, frame.payload.data(), length, nullptr));
  return frame;
}

// The error frame's payload for a handler's failure, and back.
inline std::string EncodeError(const Status& status) {
  std::string out(1, static_cast<char>(status.code()));
  out += status.message();
  return out;
}

inline Status DecodeError(std::string_view payload) {
  if (payload.empty()) return Status::Internal("function failed without a message");
  auto code = static_cast<StatusCode>(static_cast<uint8_t>(payload[0]));
  if (code == StatusCode::kOk || static_cast<uint8_t>(payload[0]) > static_cast<uint8_t>(StatusCode::kInternal)) {
    code = StatusCode::kInternal;
  }
  return Status(code, std::string(payload.substr(1)));
}

}  // namespace phos::runtime::invoke
