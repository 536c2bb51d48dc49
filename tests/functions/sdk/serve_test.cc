// The SDK serve loop in a real child process, over a socketpair, and run by hand over stdio.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "phos/ipc/instance_channel.h"

extern char** environ;

namespace phos::fn {
namespace {

namespace invoke = phos::ipc::invoke;

std::vector<char*> Env(std::vector<std::string>& storage) {
  for (char** e = environ; *e != nullptr; ++e) storage.emplace_back(*e);
  std::vector<char*> out;
  for (std::string& s : storage) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ServeTest, ReadyThenRequestsThenExitOnClose) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], 3);
  std::vector<std::string> storage = {"PHOS_INVOKE_FD=3"};
  std::vector<char*> env = Env(storage);
  char* argv[] = {const_cast<char*>(PHOS_SDK_ECHO_FN), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv, env.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(sv[1]);

  auto ready = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(ready->kind, invoke::FrameKind::kReady);

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
  ASSERT_TRUE(invoke::WriteFrame(sv[0], invoke::FrameKind::kRequest, std::string(1 << 20, 'x')).ok());
  auto big = invoke::ReadFrame(sv[0]);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->payload.size(), 1u << 20);

  close(sv[0]);
  EXPECT_EQ(WaitExit(pid), 0);
}

TEST(ServeTest, MalformedInvokeFdExits2) {
  std::vector<std::string> storage = {"PHOS_INVOKE_FD=three"};
  std::vector<char*> env = Env(storage);
  char* argv[] = {const_cast<char*>(PHOS_SDK_ECHO_FN), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv, env.data()), 0);
  EXPECT_EQ(WaitExit(pid), 2);
}

// Without PHOS_INVOKE_FD: one request from stdin, the response on stdout.
std::pair<int, std::string> RunByHand(const std::string& input) {
  int in[2];
  int out[2];
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<std::string> storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).substr(0, 15) != "PHOS_INVOKE_FD=") storage.emplace_back(*e);
  }
  std::vector<char*> env;
  for (std::string& s : storage) env.push_back(s.data());
  env.push_back(nullptr);
  char* argv[] = {const_cast<char*>(PHOS_SDK_ECHO_FN), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv, env.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  EXPECT_EQ(write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
  close(in[1]);
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) output.append(buf, n);
  close(out[0]);
  return {WaitExit(pid), output};
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
  char bad_kind[5] = {0, 0, 0, 0, 9};
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
