#include "phos/ipc/control.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/core.h>

namespace phos::ipc {
namespace {

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument(fmt::format("socket path '{}' is empty or longer than {} bytes", path, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

bool IsHexToken(std::string_view token) {
  if (token.size() != kTokenChars) return false;
  for (char c : token) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

Result<int> ListenSeqpacket(const std::string& path) {
  PHOS_ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  unlink(path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    Status s = Status::FromErrno(errno, fmt::format("listen on {}", path));
    close(fd);
    return s;
  }
  return fd;
}

Result<int> ConnectSeqpacket(const std::string& path) {
  PHOS_ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket(AF_UNIX, SOCK_SEQPACKET)");
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Status::FromErrno(errno, fmt::format("connect to {}", path));
    close(fd);
    return s;
  }
  return fd;
}

Status SendDatagram(int sock, const void* data, size_t len, int pass_fd) {
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno(errno, "sendmsg(control socket)");
  return Status::Ok();
}

Result<size_t> ReceiveDatagram(int sock, void* buf, size_t cap, int* received_fd) {
  *received_fd = -1;
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno(errno, "recvmsg(control socket)");
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (*received_fd < 0) {
        *received_fd = fd;
      } else {
        close(fd);  // one descriptor per message is all the protocol passes
      }
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    if (*received_fd >= 0) close(*received_fd);
    *received_fd = -1;
    return Status::InvalidArgument(fmt::format("control message longer than {} bytes refused", cap));
  }
  if (n == 0) return Status::NotFound("control socket closed by the peer");
  return static_cast<size_t>(n);
}

Hello MakeHello(std::string_view token, int pid, uint32_t version) {
  Hello h{};
  h.magic = kWireMagic;
  h.wire_version = version;
  h.pid = pid;
  std::memcpy(h.token, token.data(), std::min(token.size(), kTokenChars));
  return h;
}

Status CheckHello(const void* data, size_t len, std::string* token) {
  if (len != sizeof(Hello)) {
    return Status::InvalidArgument(fmt::format("hello of {} bytes, expected {}", len, sizeof(Hello)));
  }
  Hello h;
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != kWireMagic) return Status::InvalidArgument(fmt::format("hello magic {:#x} is not PHOS", h.magic));
  if (h.wire_version != kWireVersion) {
    return Status::InvalidArgument(
        fmt::format("wire version mismatch: frontend speaks version {}, phosd speaks version {}", h.wire_version, kWireVersion));
  }
  std::string_view t(h.token, kTokenChars);
  if (!IsHexToken(t)) return Status::InvalidArgument("instance token is not 32 lowercase hex digits");
  *token = std::string(t);
  return Status::Ok();
}

Answer MakeAnswer(int32_t status, std::string_view message, uint64_t ring_bytes, uint32_t version) {
  Answer a{};
  a.magic = kWireMagic;
  a.wire_version = version;
  a.status = status;
  a.ring_bytes = ring_bytes;
  std::memcpy(a.message, message.data(), std::min(message.size(), kAnswerMessageChars - 1));
  return a;
}

Status CheckAnswer(const void* data, size_t len) {
  if (len != sizeof(Answer)) return Status::InvalidArgument(fmt::format("answer of {} bytes, expected {}", len, sizeof(Answer)));
  Answer a;
  std::memcpy(&a, data, sizeof(a));
  a.message[kAnswerMessageChars - 1] = '\0';
  if (a.magic != kWireMagic) return Status::InvalidArgument(fmt::format("answer magic {:#x} is not PHOS", a.magic));
  if (a.wire_version != kWireVersion) {
    return Status::InvalidArgument(
        fmt::format("wire version mismatch: phosd speaks version {}, frontend speaks version {}", a.wire_version, kWireVersion));
  }
  if (a.status != 0) return Status::FailedPrecondition(fmt::format("phosd refused the session: {}", a.message));
  return Status::Ok();
}

std::string NewToken(size_t bytes) {
  std::vector<unsigned char> random(bytes);
  size_t got = 0;
  while (got < random.size()) {
    ssize_t n = getrandom(random.data() + got, random.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string out;
  for (unsigned char b : random) out += fmt::format("{:02x}", b);
  return out;
}

}  // namespace phos::ipc
