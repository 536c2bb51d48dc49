// The invocation channel between phosd's instance manager and a function's SDK serve loop
// (docs/remoting.md): a stream socketpair, the function's end passed as PHOS_INVOKE_FD.
//
// Frame: u32 payload length (host byte order: both ends are on one machine), u8 kind, payload.
//   ready     function -> phosd  once, at the serve loop's first wait (the pre-entry point): the
//                                SDK's capabilities, words separated by spaces ("request-id");
//                                empty from an SDK older than them
//   request-id phosd -> function the id of the request that follows (its X-Request-Id), sent just
//                                before it, only to a function whose ready named "request-id"
//   request   phosd -> function  the invocation's body
//   piece     function -> phosd  a piece of the answer, sent as soon as the handler made it
//                                (phosd forwards it, e.g. as an HTTP chunk); any number of them
//                                precede the `response` (the last piece) or `error`
//   response  function -> phosd  the handler's answer (its last piece, when pieces preceded it)
//   error     function -> phosd  u8 phos::StatusCode, then the message
// Fork template protocol (the CPU-state backends of phosd's runtime):
//   fork      phosd -> template  session variables (EncodeEnv); carries the new instance's end of
//                                a fresh channel socketpair (SCM_RIGHTS). The template forks; the
//                                new instance announces `ready` on that channel.
//   forked    template -> phosd  the new instance's pid, in decimal. A refused fork is answered
//                                with `error` instead, and the template keeps waiting.
//   adopt     phosd -> instance  session variables (EncodeEnv), sent to a process restored from a
//                                CRIU image: it drops its inherited GPU session, takes the
//                                variables and answers `ready`.
//   checkpoint phosd -> instance an idle instance's CPU state kept as a new template (a checkpoint
//                                of a running instance, docs/design.md D10); empty; carries the new
//                                template's end of a fresh channel socketpair (SCM_RIGHTS). The
//                                instance forks and answers `forked` (or `error`) as a template
//                                does; the fork drops its GPU session, announces `ready` on that
//                                channel and waits there for fork frames. The instance serves on.
//
// It lives in ipc/ because both ends use it: phosd's instance manager and the function SDK, which
// links nothing of the daemon's runtime.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::ipc::invoke {

// Numbers are wire values: never renumber, only append.
enum class FrameKind : uint8_t {
  kReady = 1,
  kRequest = 2,
  kResponse = 3,
  kError = 4,
  kFork = 5,
  kForked = 6,
  kAdopt = 7,
  kPiece = 8,
  kCheckpoint = 9,
  kRequestId = 10,
};
inline constexpr uint8_t kLastFrameKind = static_cast<uint8_t>(FrameKind::kRequestId);

// What this SDK's ready frame says it takes beyond requests, and whether a ready payload says so
// (one longer than kMaxReadyPayload says nothing).
inline constexpr std::string_view kReadyCapabilities = "request-id";
inline constexpr size_t kMaxReadyPayload = 1024;
bool TakesRequestIds(std::string_view ready_payload);

// A frame larger than this is refused by the reader (a corrupt length must not allocate GiBs).
inline constexpr uint32_t kMaxFramePayload = 256u << 20;
inline constexpr const char* kInvokeFdEnv = "PHOS_INVOKE_FD";

struct Frame {
  FrameKind kind = FrameKind::kReady;
  std::string payload;
};

Status WriteFrame(int fd, FrameKind kind, std::string_view payload);

// Writes a frame with `pass_fd` attached (SCM_RIGHTS) to its header; the caller keeps its copy.
Status WriteFrameWithFd(int fd, FrameKind kind, std::string_view payload, int pass_fd);

// Reads one frame. A clean close before a frame gives Unavailable with `*closed` set to true.
// With `passed_fd` (set to -1 first), a descriptor attached to the frame is returned there and
// is the caller's to close; without it, attached descriptors are dropped.
Result<Frame> ReadFrame(int fd, bool* closed = nullptr, int* passed_fd = nullptr);

// Session variables (fork, adopt): NAME=VALUE entries, each ended by a NUL byte.
using EnvList = std::vector<std::pair<std::string, std::string>>;

Result<std::string> EncodeEnv(const EnvList& env);
Result<EnvList> DecodeEnv(std::string_view payload);

// The error frame's payload for a handler's failure, and back.
std::string EncodeError(const Status& status);
Status DecodeError(std::string_view payload);

}  // namespace phos::ipc::invoke
