// The SDK serve loop in a real child process, over a socketpair, and run by hand over stdio.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "phos/base/subprocess.h"
#include "phos/ipc/instance_channel.h"

namespace phos::fn {
namespace {

namespace invoke = phos::ipc::invoke;

constexpr std::chrono::seconds kExitTimeout{60};

// The function's exit code (128 + the signal when one killed it); -1 when it did not end in time.
int WaitExit(Subprocess& fn) {
  Result<ExitStatus> how = fn.Wait(kExitTimeout);
  return how.ok() ? how->ShellCode() : -1;
}

TEST(ServeTest, ReadyThenRequestsThenExitOnClose) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  SpawnOptions options;
  options.argv = {PHOS_SDK_ECHO_FN};
  options.env = {{"PHOS_INVOKE_FD", "3"}};
  options.fds = {{sv[1], 3}};
  Result<Subprocess> fn = Subprocess::Spawn(options);
  ASSERT_TRUE(fn.ok()) << fn.status().ToString();
  close(sv[1]);

  auto ready = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(ready->kind, invoke::FrameKind::kReady);
  EXPECT_TRUE(invoke::TakesRequestIds(ready->payload)) << ready->payload;

  // A request id frame names the request that follows it, and only that one.
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequestId, "trace-7").ok());
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "request-id").ok());
  auto id = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->payload, "trace-7");
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "request-id").ok());
  auto none = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->payload, "");

  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "hello").ok());
  auto echoed = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(echoed.ok());
  EXPECT_EQ(echoed->kind, invoke::FrameKind::kResponse);
  EXPECT_EQ(echoed->payload, "hello");

  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "fail").ok());
  auto failed = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(failed.ok());
  ASSERT_EQ(failed->kind, invoke::FrameKind::kError);
  Status error = invoke::DecodeError(failed->payload);
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(error.message(), "asked to fail");

  // A throwing handler fails its invocation; the instance keeps serving.
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "throw").ok());
  auto thrown = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(thrown.ok());
  EXPECT_EQ(thrown->kind, invoke::FrameKind::kError);
  EXPECT_NE(invoke::DecodeError(thrown->payload).message().find("asked to throw"), std::string::npos);
  // Pieces, each its own frame, before the last one as the response.
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "pieces:one,,two,three").ok());
  std::vector<std::pair<invoke::FrameKind, std::string>> frames;
  for (int i = 0; i < 3; ++i) {
    auto f = invoke::ReadFrame(sv[0]);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    frames.emplace_back(f->kind, f->payload);
  }
  EXPECT_EQ(frames[0], std::make_pair(invoke::FrameKind::kPiece, std::string("one")));
  EXPECT_EQ(frames[1], std::make_pair(invoke::FrameKind::kPiece, std::string("two"))) << "an empty piece is not sent";
  EXPECT_EQ(frames[2], std::make_pair(invoke::FrameKind::kResponse, std::string("three")));
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, "pieces-then-fail:half").ok());
  auto piece = invoke::ReadFrame(sv[0]);
  auto after = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(piece.ok() && after.ok());
  EXPECT_EQ(piece->kind, invoke::FrameKind::kPiece);
  EXPECT_EQ(after->kind, invoke::FrameKind::kError);
  EXPECT_EQ(invoke::DecodeError(after->payload).message(), "failed after a piece");

  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, std::string(1 << 20, 'x')).ok());
  auto big = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->payload.size(), 1u << 20);

  close(sv[0]);
  EXPECT_EQ(WaitExit(*fn), 0);
}

TEST(ServeTest, MalformedInvokeFdExits2) {
  SpawnOptions options;
  options.argv = {PHOS_SDK_ECHO_FN};
  options.env = {{"PHOS_INVOKE_FD", "three"}};
  Result<Subprocess> fn = Subprocess::Spawn(options);
  ASSERT_TRUE(fn.ok()) << fn.status().ToString();
  EXPECT_EQ(WaitExit(*fn), 2);
}

// Without PHOS_INVOKE_FD: one request from stdin, the response on stdout.
std::pair<int, std::string> RunByHand(const std::string& input) {
  int in[2];
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  // The request fits the pipe's buffer: written whole before the function starts.
  EXPECT_EQ(write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
  close(in[1]);
  SpawnOptions options;
  options.argv = {PHOS_SDK_ECHO_FN};
  options.unset_env = {"PHOS_INVOKE_FD"};
  options.fds = {{in[0], 0}};
  Result<CommandOutput> out = RunCommand(std::move(options), kExitTimeout);
  close(in[0]);
  if (!out.ok()) return {-1, out.status().ToString()};
  return {out->status.ShellCode(), out->output};
}

TEST(ServeTest, ByHandServesOneRequestOverStdio) {
  auto [code, output] = RunByHand("by hand");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(output, "by hand");
  auto [fail_code, fail_output] = RunByHand("fail");
  EXPECT_EQ(fail_code, 1);
  EXPECT_EQ(fail_output, "");
}

TEST(InvokeFrameTest, RejectsUnknownKindAndOversizeLength) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  char bad_kind[5] = {0, 0, 0, 0, static_cast<char>(invoke::kLastFrameKind + 1)};
  ASSERT_EQ(write(sv[0], bad_kind, 5), 5);
  EXPECT_EQ(invoke::ReadFrame(sv[1]).status().code(), StatusCode::kCorruption);
  char huge[5] = {'\xff', '\xff', '\xff', '\x7f', 3};
  ASSERT_EQ(write(sv[0], huge, 5), 5);
  EXPECT_EQ(invoke::ReadFrame(sv[1]).status().code(), StatusCode::kCorruption);
  // A close mid-frame is not a clean close.
  char partial[3] = {5, 0, 0};
  ASSERT_EQ(write(sv[0], partial, 3), 3);
  close(sv[0]);
  bool closed = true;
  EXPECT_FALSE(invoke::ReadFrame(sv[1], &closed).ok());
  EXPECT_FALSE(closed);
  bool clean = false;
  EXPECT_FALSE(invoke::ReadFrame(sv[1], &clean).ok());
  EXPECT_TRUE(clean);
  close(sv[1]);
}

}  // namespace
}  // namespace phos::fn
