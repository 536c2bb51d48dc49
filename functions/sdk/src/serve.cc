#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <iterator>
#include <mutex>

#include "fork_template.h"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/ipc/instance_channel.h"

namespace phos::fn {
namespace {

namespace invoke = phos::ipc::invoke;

// The id of the request the handler on this thread serves (RequestId()).
thread_local std::string t_request_id;

// Pieces written as `piece` frames on the invocation channel, until the handler returns: a piece
// sent after that (from a thread the handler left behind) would start the next request's answer
// or cut into a frame of it, so it is refused.
class ChannelPieces : public Pieces {
 public:
  explicit ChannelPieces(int fd) : fd_(fd) {}
  Status Send(std::string_view piece) override {
    std::lock_guard lock(mu_);
    if (closed_) return Status::FailedPrecondition("the request this piece belonged to was answered");
    if (piece.empty()) return Status::Ok();  // nothing to forward
    return invoke::WriteFrame(fd_, invoke::FrameKind::kPiece, piece);
  }
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }

 private:
  std::mutex mu_;
  bool closed_ = false;
  int fd_;
};

// Pieces written to standard output as they come (a function run by hand).
class StdoutPieces : public Pieces {
 public:
  Status Send(std::string_view piece) override {
    std::cout << piece << std::flush;
    return std::cout ? Status::Ok() : Status::Unavailable("standard output is closed");
  }
};

// The SDK is the boundary between a function's code and phosd: a handler that throws fails its
// invocation rather than killing the instance.
Result<std::string> CallHandler(const StreamingHandler& handler, std::string_view request, Pieces& out) {
  try {
    return handler(request, out);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("handler threw: ") + e.what());
  } catch (...) {
    return Status::Internal("handler threw a non-standard exception");
  }
}

int ServeStdin(const StreamingHandler& handler) {
  std::string request((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  StdoutPieces out;
  Result<std::string> response = CallHandler(handler, request, out);
  if (!response.ok()) {
    std::cerr << response.status().ToString() << "\n";
    return 1;
  }
  std::cout << *response << std::flush;
  return 0;
}

}  // namespace

std::string_view RequestId() { return t_request_id; }

int Serve(Handler handler) {
  return Serve(StreamingHandler([handler = std::move(handler)](std::string_view request, Pieces&) {
    return handler(request);
  }));
}

int Serve(StreamingHandler handler) {
  const char* env = std::getenv(invoke::kInvokeFdEnv);
  if (env == nullptr) return ServeStdin(handler);
  int fd = -1;
  std::string_view text(env);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), fd);
  if (ec != std::errc() || end != text.data() + text.size() || fd < 0) {
    PHOS_LOG(Error, "fn", "{}='{}' is not a file descriptor", invoke::kInvokeFdEnv, env);
    return 2;
  }
  Status sent = invoke::WriteFrame(fd, invoke::FrameKind::kReady, invoke::kReadyCapabilities);
  if (!sent.ok()) {
    PHOS_LOG(Error, "fn", "cannot announce readiness: {}", sent.ToString());
    return 2;
  }
  PHOS_LOG(Info, "pre-entry", "pid {} initialised; waiting for the first request", getpid());
  uint64_t served = 0;
  std::string next_request_id;  // from the request-id frame, for the request that follows it
  while (true) {
    bool closed = false;
    int passed_fd = -1;
    Result<invoke::Frame> frame = invoke::ReadFrame(fd, &closed, &passed_fd);
    if (!frame.ok()) {
      if (closed) {
        PHOS_LOG(Info, "fn", "channel closed after {} requests; exiting", served);
        return 0;
      }
      PHOS_LOG(Error, "fn", "invoke channel: {}", frame.status().ToString());
      return 2;
    }
    if (frame->kind == invoke::FrameKind::kRequestId) {
      next_request_id = std::move(frame->payload);
      continue;
    }
    if (frame->kind != invoke::FrameKind::kRequest) next_request_id.clear();  // the id named no request
    if (frame->kind == invoke::FrameKind::kFork || frame->kind == invoke::FrameKind::kCheckpoint) {
      // A fork frame makes a new instance of this template; a checkpoint frame a new template of
      // this instance, which serves on.
      const bool fork = frame->kind == invoke::FrameKind::kFork;
      Result<detail::ForkOutcome> outcome = detail::HandleFork(
          fd, frame->payload, passed_fd, fork ? detail::ForkRole::kInstance : detail::ForkRole::kTemplate);
      if (!outcome.ok()) {
        PHOS_LOG(Error, "fn", "cannot answer a {} frame: {}", fork ? "fork" : "checkpoint", outcome.status().ToString());
        return 2;
      }
      if (outcome->in_child) {
        fd = outcome->channel_fd;
        served = 0;
      }
      continue;
    }
    if (passed_fd >= 0) close(passed_fd);
    if (frame->kind == invoke::FrameKind::kAdopt) {
      // A process restored from a CRIU image: its GPU session and token were the captured one's.
      Status adopted = detail::AdoptSession(frame->payload);
      Status written = adopted.ok() ? invoke::WriteFrame(fd, invoke::FrameKind::kReady, invoke::kReadyCapabilities)
                                    : invoke::WriteFrame(fd, invoke::FrameKind::kError, invoke::EncodeError(adopted));
      if (!adopted.ok() || !written.ok()) {
        PHOS_LOG(Error, "fn", "cannot adopt a new session: {}", (adopted.ok() ? written : adopted).ToString());
        return 2;
      }
      served = 0;
      continue;
    }
    if (frame->kind != invoke::FrameKind::kRequest) {
      PHOS_LOG(Error, "fn", "unexpected frame kind {} from phosd", static_cast<int>(frame->kind));
      return 2;
    }
    ChannelPieces pieces(fd);
    t_request_id = std::move(next_request_id);
    next_request_id.clear();
    Result<std::string> response = CallHandler(handler, frame->payload, pieces);
    t_request_id.clear();
    pieces.Close();
    ++served;
    Status written = response.ok() ? invoke::WriteFrame(fd, invoke::FrameKind::kResponse, *response)
                                   : invoke::WriteFrame(fd, invoke::FrameKind::kError,
                                                        invoke::EncodeError(response.status()));
    if (!written.ok()) {
      PHOS_LOG(Error, "fn", "cannot answer: {}", written.ToString());
      return 2;
    }
  }
}

}  // namespace phos::fn
