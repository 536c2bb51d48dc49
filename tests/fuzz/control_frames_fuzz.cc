// What a function process sends phosd outside the ring (ipc/): the control socket's hello and
// answer datagrams, and the invocation channel's frames (ipc/src/instance_channel.cc) with the
// payloads decoded from them (session variables, error frames). The frames go through a real
// socketpair, so ReadFrame's own reads (short ones, a close mid-frame) are what is fuzzed.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "phos/ipc/control.h"
#include "phos/ipc/instance_channel.h"

namespace {

namespace invoke = phos::ipc::invoke;

void CheckDatagrams(const uint8_t* data, size_t size) {
  std::string token;
  (void)phos::ipc::CheckHello(data, size, &token);
  (void)phos::ipc::CheckAnswer(data, size);
  // At their exact sizes too, where every field is checked.
  if (size >= sizeof(phos::ipc::Hello)) {
    if (phos::ipc::CheckHello(data, sizeof(phos::ipc::Hello), &token).ok() && token.size() != 32) std::abort();
  }
  if (size >= sizeof(phos::ipc::Answer)) (void)phos::ipc::CheckAnswer(data, sizeof(phos::ipc::Answer));
}

void CheckPayload(const invoke::Frame& frame) {
  switch (frame.kind) {
    case invoke::FrameKind::kFork:
    case invoke::FrameKind::kAdopt: {
      phos::Result<invoke::EnvList> env = invoke::DecodeEnv(frame.payload);
      if (!env.ok()) return;
      // What decodes encodes back to the same bytes.
      phos::Result<std::string> again = invoke::EncodeEnv(*env);
      if (!again.ok() || *again != frame.payload) std::abort();
      return;
    }
    case invoke::FrameKind::kError: {
      phos::Status status = invoke::DecodeError(frame.payload);
      if (status.ok()) std::abort();  // an error frame never reads as success
      return;
    }
    default:
      return;
  }
}

// Feeds the bytes to ReadFrame through a stream socketpair, the writer closed after them.
void ReadFrames(const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  // What fits the socket buffer without blocking: the fuzzer's inputs are far smaller.
  const size_t len = std::min<size_t>(size, 64u << 10);
  size_t written = 0;
  while (written < len) {
    ssize_t n = send(fds[1], data + written, len - written, MSG_NOSIGNAL);
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }
  close(fds[1]);
  for (;;) {
    bool closed = false;
    int passed_fd = -1;
    phos::Result<invoke::Frame> frame = invoke::ReadFrame(fds[0], &closed, &passed_fd);
    if (passed_fd >= 0) close(passed_fd);
    if (!frame.ok()) break;
    CheckPayload(*frame);
  }
  close(fds[0]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckDatagrams(data, size);
  // The whole input as one frame's payload too, so the decoders see inputs the frame reader
  // would have cut short.
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  CheckPayload({invoke::FrameKind::kFork, std::string(bytes)});
  CheckPayload({invoke::FrameKind::kError, std::string(bytes)});
  ReadFrames(data, size);
  return 0;
}
