// The invocation channel's frame codec (phos/ipc/instance_channel.h).
#include "phos/ipc/instance_channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "phos/base/strings.h"

namespace phos::ipc::invoke {

namespace {

Status WriteAll(int fd, const char* data, size_t size) {
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

// recv() of the channel; with `passed_fd`, recvmsg() keeps a file descriptor the peer attached
// (the first one; plain read() would make the kernel close it). Received descriptors are
// close-on-exec.
ssize_t ReceiveSome(int fd, char* data, size_t size, int* passed_fd) {
  if (passed_fd == nullptr) return read(fd, data, size);
  iovec iov{data, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n >= 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int received = -1;
    std::memcpy(&received, CMSG_DATA(c), sizeof(int));
    if (*passed_fd < 0) {
      *passed_fd = received;
    } else {
      close(received);
    }
  }
  return n;
}

// Reads exactly `size` bytes. `*eof_at_start` is set when the peer closed before the first byte.
Status ReadAll(int fd, char* data, size_t size, bool* eof_at_start, int* passed_fd) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ReceiveSome(fd, data + done, size - done, passed_fd);
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

}  // namespace

bool TakesRequestIds(std::string_view ready_payload) {
  // A function process is hostile: a payload no SDK sends takes nothing, and is not split (a
  // frame may be 256 MiB of words).
  if (ready_payload.size() > kMaxReadyPayload) return false;
  for (std::string_view word : Split(ready_payload, " ", EmptyPieces::kSkip)) {
    if (word == "request-id") return true;
  }
  return false;
}

Status WriteFrame(int fd, FrameKind kind, std::string_view payload) {
  if (payload.size() > kMaxFramePayload) {
    return Status::InvalidArgument("invoke frame of " + std::to_string(payload.size()) +
                                   " bytes exceeds the " + std::to_string(kMaxFramePayload) + "-byte limit");
  }
  char header[5];
  uint32_t length = static_cast<uint32_t>(payload.size());
  std::memcpy(header, &length, 4);
  header[4] = static_cast<char>(kind);
  PHOS_RETURN_IF_ERROR(WriteAll(fd, header, sizeof(header)));
  return WriteAll(fd, payload.data(), payload.size());
}

Status WriteFrameWithFd(int fd, FrameKind kind, std::string_view payload, int pass_fd) {
  if (payload.size() > kMaxFramePayload) {
    return Status::InvalidArgument("invoke frame of " + std::to_string(payload.size()) +
                                   " bytes exceeds the " + std::to_string(kMaxFramePayload) + "-byte limit");
  }
  char header[5];
  uint32_t length = static_cast<uint32_t>(payload.size());
  std::memcpy(header, &length, 4);
  header[4] = static_cast<char>(kind);
  iovec iov{header, sizeof(header)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno(errno, "invoke channel sendmsg");
  // The descriptor travelled with the first byte; the rest of the header is plain data.
  PHOS_RETURN_IF_ERROR(WriteAll(fd, header + n, sizeof(header) - static_cast<size_t>(n)));
  return WriteAll(fd, payload.data(), payload.size());
}

namespace {

// ReadFrame without its cleanup: a descriptor received with a frame it then refuses stays open.
Result<Frame> ReadFrameKeepingFd(int fd, bool* closed, int* passed_fd) {
  char header[5];
  PHOS_RETURN_IF_ERROR(ReadAll(fd, header, sizeof(header), closed, passed_fd));
  uint32_t length = 0;
  std::memcpy(&length, header, 4);
  auto kind = static_cast<uint8_t>(header[4]);
  if (kind < static_cast<uint8_t>(FrameKind::kReady) || kind > kLastFrameKind) {
    return Status::Corruption("invoke frame of unknown kind " + std::to_string(kind));
  }
  if (length > kMaxFramePayload) {
    return Status::Corruption("invoke frame of " + std::to_string(length) + " bytes exceeds the limit");
  }
  Frame frame;
  frame.kind = static_cast<FrameKind>(kind);
  // The payload grows as its bytes arrive: a length the peer claims but never sends costs at most
  // one piece, not the claimed size.
  constexpr size_t kPiece = 1u << 20;
  size_t have = 0;
  while (have < length) {
    const size_t piece = std::min<size_t>(length - have, kPiece);
    frame.payload.resize(have + piece);
    PHOS_RETURN_IF_ERROR(ReadAll(fd, frame.payload.data() + have, piece, nullptr, nullptr));
    have += piece;
  }
  return frame;
}

}  // namespace

Result<Frame> ReadFrame(int fd, bool* closed, int* passed_fd) {
  if (closed != nullptr) *closed = false;
  if (passed_fd != nullptr) *passed_fd = -1;
  Result<Frame> frame = ReadFrameKeepingFd(fd, closed, passed_fd);
  // A refused frame's descriptor is nobody's: the caller gets an error, not a descriptor to close.
  if (!frame.ok() && passed_fd != nullptr && *passed_fd >= 0) {
    close(*passed_fd);
    *passed_fd = -1;
  }
  return frame;
}

Result<std::string> EncodeEnv(const EnvList& env) {
  std::string out;
  for (const auto& [name, value] : env) {
    if (name.empty() || name.find_first_of(std::string_view("=\0", 2)) != std::string::npos ||
        value.find('\0') != std::string::npos) {
      return Status::InvalidArgument("session variable '" + name +
                                     "' has an empty name, or '=' or NUL in it");
    }
    out += name;
    out += '=';
    out += value;
    out += '\0';
  }
  return out;
}

Result<EnvList> DecodeEnv(std::string_view payload) {
  EnvList env;
  while (!payload.empty()) {
    size_t end = payload.find('\0');
    if (end == std::string_view::npos)
      return Status::Corruption("session variables: last entry is not NUL-ended");
    std::string_view entry = payload.substr(0, end);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Status::Corruption("session variables: entry '" + std::string(entry) + "' is not NAME=VALUE");
    }
    env.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
    payload.remove_prefix(end + 1);
  }
  return env;
}

std::string EncodeError(const Status& status) {
  std::string out(1, static_cast<char>(status.code()));
  out += status.message();
  return out;
}

Status DecodeError(std::string_view payload) {
  if (payload.empty()) return Status::Internal("function failed without a message");
  auto code = static_cast<StatusCode>(static_cast<uint8_t>(payload[0]));
  if (code == StatusCode::kOk ||
      static_cast<uint8_t>(payload[0]) > static_cast<uint8_t>(StatusCode::kInternal)) {
    code = StatusCode::kInternal;
  }
  return Status(code, std::string(payload.substr(1)));
}

}  // namespace phos::ipc::invoke
