// Subprocess against /bin/sh and sleep: exit codes, signals, timeouts, descriptors, environment,
// process groups and reaping. No assertion depends on how long anything took.
#include "phos/base/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

namespace phos {
namespace {

using std::chrono::milliseconds;

// A generous bound for things that end by themselves: reached only when the code under test is
// broken, in which case the test fails instead of hanging.
constexpr milliseconds kLongGrace{60000};

SpawnOptions Shell(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

// Reads one line (without its newline) from `fd`; "" at end of file.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

// The pipe's two ends, closed at the end of the scope.
struct Pipe {
  Pipe() { EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseWriteEnd() {
    close(fds[1]);
    fds[1] = -1;
  }
  int read_end() const { return fds[0]; }
  int write_end() const { return fds[1]; }
  int fds[2] = {-1, -1};
};

// Grandchildren orphaned by a test become this process's children, so that a test can reap
// them and see how they ended.
class SubprocessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0); }
};

TEST_F(SubprocessTest, ReportsTheExitCode) {
  Result<Subprocess> child = Subprocess::Spawn(Shell("exit 7"));
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ExitStatus> how = child->Wait();
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_TRUE(how->exited());
  EXPECT_EQ(how->exit_code, 7);
  EXPECT_EQ(how->ShellCode(), 7);
  EXPECT_EQ(how->ToString(), "exited with code 7");
  EXPECT_FALSE(child->running());
  ASSERT_TRUE(child->exit_status().has_value());
  EXPECT_EQ(child->exit_status()->exit_code, 7);
}

TEST_F(SubprocessTest, ReportsTheKillingSignal) {
  Result<Subprocess> child = Subprocess::Spawn(Shell("kill -ABRT $$"));
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ExitStatus> how = child->Wait();
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_FALSE(how->exited());
  EXPECT_EQ(how->signal, SIGABRT);
  EXPECT_EQ(how->exit_code, -1);
  EXPECT_EQ(how->ShellCode(), 128 + SIGABRT);
  EXPECT_EQ(how->ToString(), "killed by signal 6 (Aborted)");
}

TEST_F(SubprocessTest, WaitTimesOutAndLeavesTheProcessRunning) {
  Result<Subprocess> child = Subprocess::Spawn({.argv = {"sleep", "infinity"}});
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ExitStatus> how = child->Wait(milliseconds(20));
  EXPECT_EQ(how.status().code(), StatusCode::kTimeout) << how.status().ToString();
  EXPECT_TRUE(child->running());
  Result<ExitStatus> stopped = child->Stop(milliseconds(0), SIGKILL);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_EQ(stopped->signal, SIGKILL);
  EXPECT_FALSE(child->running());
}

TEST_F(SubprocessTest, StopSendsItsFirstSignal) {
  Result<Subprocess> child = Subprocess::Spawn({.argv = {"sleep", "infinity"}});
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ExitStatus> how = child->Stop(kLongGrace, SIGTERM);
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_EQ(how->signal, SIGTERM);
}

TEST_F(SubprocessTest, ChildStartsWithNoSignalBlocked) {
  sigset_t usr1;
  sigset_t old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &old), 0);
  Result<Subprocess> child = Subprocess::Spawn({.argv = {"sleep", "infinity"}});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  // Had the child inherited the mask, SIGUSR1 would stay pending and the grace end in SIGKILL.
  Result<ExitStatus> how = child->Stop(kLongGrace, SIGUSR1);
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_EQ(how->signal, SIGUSR1);
}

TEST_F(SubprocessTest, PassesDescriptorsUnderTheirNewNumbersAndClosesTheRest) {
  Pipe a;
  Pipe b;
  // Mapped crosswise: each source is the other's target number.
  ASSERT_EQ(dup2(a.write_end(), 50), 50);
  ASSERT_EQ(dup2(b.write_end(), 51), 51);
  // Not close-on-exec, and not mapped: the child must not have it.
  int leaked = fcntl(a.write_end(), F_DUPFD, 60);
  ASSERT_GE(leaked, 60);
  // bash: dash redirects single-digit descriptors only.
  SpawnOptions o;
  o.argv = {"/bin/bash", "-c",
            "echo to-fifty >&50; echo to-fifty-one >&51; "
            "if [ -e /proc/$$/fd/" +
                std::to_string(leaked) + " ]; then echo leaked >&50; fi"};
  o.fds = {{50, 51}, {51, 50}};
  Result<Subprocess> child = Subprocess::Spawn(o);
  close(50);
  close(51);
  close(leaked);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ExitStatus> how = child->Wait();
  ASSERT_TRUE(how.ok() && how->success()) << (how.ok() ? how->ToString() : how.status().ToString());
  a.CloseWriteEnd();
  b.CloseWriteEnd();
  // The child's 50 was b's write end, its 51 a's.
  EXPECT_EQ(ReadLine(b.read_end()), "to-fifty");
  EXPECT_EQ(ReadLine(b.read_end()), "");
  EXPECT_EQ(ReadLine(a.read_end()), "to-fifty-one");
  EXPECT_EQ(ReadLine(a.read_end()), "");
}

TEST_F(SubprocessTest, SetsReplacesAndRemovesEnvironmentVariables) {
  ASSERT_EQ(setenv("PHOS_SUBPROCESS_TEST_KEPT", "kept", 1), 0);
  ASSERT_EQ(setenv("PHOS_SUBPROCESS_TEST_REPLACED", "old", 1), 0);
  ASSERT_EQ(setenv("PHOS_SUBPROCESS_TEST_REMOVED", "removed", 1), 0);
  SpawnOptions o = Shell(
      "echo \"$PHOS_SUBPROCESS_TEST_KEPT $PHOS_SUBPROCESS_TEST_REPLACED $PHOS_SUBPROCESS_TEST_ADDED "
      "${PHOS_SUBPROCESS_TEST_REMOVED-unset}\"");
  o.env = {{"PHOS_SUBPROCESS_TEST_REPLACED", "first"},
           {"PHOS_SUBPROCESS_TEST_ADDED", "added"},
           {"PHOS_SUBPROCESS_TEST_REPLACED", "new"}};
  o.unset_env = {"PHOS_SUBPROCESS_TEST_REMOVED"};
  Result<CommandOutput> run = RunCommand(o, std::nullopt);
  unsetenv("PHOS_SUBPROCESS_TEST_KEPT");
  unsetenv("PHOS_SUBPROCESS_TEST_REPLACED");
  unsetenv("PHOS_SUBPROCESS_TEST_REMOVED");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_TRUE(run->status.success());
  EXPECT_EQ(run->output, "kept new added unset\n");
}

TEST_F(SubprocessTest, StopKillsTheWholeGroup) {
  Pipe out;
  SpawnOptions o = Shell("sleep infinity & echo $!; wait");
  o.fds = {{out.write_end(), STDOUT_FILENO}};
  Result<Subprocess> child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  out.CloseWriteEnd();
  pid_t grandchild = std::atoi(ReadLine(out.read_end()).c_str());
  ASSERT_GT(grandchild, 0);
  // No first signal and no grace: straight to SIGKILL for the group.
  Result<ExitStatus> how = child->Stop(milliseconds(0), 0);
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_EQ(how->signal, SIGKILL);
  // Orphaned when the shell died, the sleep is now this subreaper's child.
  Result<Subprocess> orphan = Subprocess::Adopt(grandchild, false);
  ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
  Result<ExitStatus> orphan_how = orphan->Wait();
  ASSERT_TRUE(orphan_how.ok()) << orphan_how.status().ToString();
  EXPECT_EQ(orphan_how->signal, SIGKILL);
}

TEST_F(SubprocessTest, StopOfAnExitedLeaderKillsWhatItLeftInItsGroup) {
  Pipe out;
  SpawnOptions o = Shell("sleep infinity & echo $!");
  o.fds = {{out.write_end(), STDOUT_FILENO}};
  Result<Subprocess> child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  out.CloseWriteEnd();
  pid_t grandchild = std::atoi(ReadLine(out.read_end()).c_str());
  ASSERT_GT(grandchild, 0);
  Result<ExitStatus> how = child->Stop(kLongGrace, 0);
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_EQ(how->ToString(), "exited with code 0");
  Result<Subprocess> orphan = Subprocess::Adopt(grandchild, false);
  ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
  Result<ExitStatus> orphan_how = orphan->Wait();
  ASSERT_TRUE(orphan_how.ok()) << orphan_how.status().ToString();
  EXPECT_EQ(orphan_how->signal, SIGKILL);
}

TEST_F(SubprocessTest, DestroyingARunningSubprocessKillsAndReapsIt) {
  pid_t pid = -1;
  {
    Result<Subprocess> child = Subprocess::Spawn({.argv = {"sleep", "infinity"}});
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    pid = child->pid();
    ASSERT_GT(pid, 0);
  }
  // Reaped: no zombie of it is left to wait for.
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(SubprocessTest, MovedFromSubprocessOwnsNothing) {
  Result<Subprocess> child = Subprocess::Spawn({.argv = {"sleep", "infinity"}});
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  pid_t pid = child->pid();
  Subprocess owner = std::move(child).value();
  EXPECT_EQ(owner.pid(), pid);
  EXPECT_TRUE(owner.running());
  Result<ExitStatus> how = owner.Stop(milliseconds(0), SIGKILL);
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_EQ(how->signal, SIGKILL);
}

TEST_F(SubprocessTest, ReleasedProcessCanBeAdoptedAgain) {
  Result<Subprocess> child = Subprocess::Spawn(Shell("exit 3"));
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  pid_t pid = child->Release();
  EXPECT_FALSE(child->running());
  Result<Subprocess> again = Subprocess::Adopt(pid, true);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Result<ExitStatus> how = again->Stop(kLongGrace, 0);
  ASSERT_TRUE(how.ok()) << how.status().ToString();
  EXPECT_EQ(how->exit_code, 3);
}

TEST_F(SubprocessTest, RunCommandCapturesStdoutAndStderr) {
  SpawnOptions o = Shell("echo out; echo err >&2; exit 4");
  o.stderr_to_stdout = true;
  Result<CommandOutput> run = RunCommand(o, kLongGrace);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->status.exit_code, 4);
  EXPECT_EQ(run->output, "out\nerr\n");
}

TEST_F(SubprocessTest, RunCommandKillsACommandPastItsTimeout) {
  Result<CommandOutput> run = RunCommand({.argv = {"sleep", "infinity"}}, milliseconds(20));
  EXPECT_EQ(run.status().code(), StatusCode::kTimeout) << run.status().ToString();
}

TEST_F(SubprocessTest, StdoutFileIsAppendedTo) {
  std::string path = ::testing::TempDir() + "/subprocess-test-" + std::to_string(getpid()) + ".log";
  unlink(path.c_str());
  for (const char* word : {"one", "two"}) {
    SpawnOptions o = Shell(std::string("echo ") + word + "; echo " + word + "-err >&2");
    o.stdout_file = path;
    o.stderr_to_stdout = true;
    Result<Subprocess> child = Subprocess::Spawn(o);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    ASSERT_TRUE(child->Wait().ok());
  }
  Result<CommandOutput> cat = RunCommand({.argv = {"cat", path}}, std::nullopt);
  unlink(path.c_str());
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  EXPECT_EQ(cat->output, "one\none-err\ntwo\ntwo-err\n");
}

TEST_F(SubprocessTest, RefusesMalformedRequests) {
  EXPECT_EQ(Subprocess::Spawn({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Subprocess::Spawn({.argv = {""}}).status().code(), StatusCode::kInvalidArgument);
  Result<Subprocess> missing = Subprocess::Spawn({.argv = {"/nonexistent/phos-program"}});
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("No such file or directory"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(Subprocess::Spawn({.argv = {"true"}, .fds = {{0, 3}, {1, 3}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Subprocess::Spawn({.argv = {"true"}, .fds = {{-1, 3}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Subprocess::Spawn({.argv = {"true"}, .fds = {{999, 3}}}).status().code(), StatusCode::kIoError);
  EXPECT_EQ(
      Subprocess::Spawn({.argv = {"true"}, .fds = {{0, 1}}, .stdout_file = "/dev/null"}).status().code(),
      StatusCode::kInvalidArgument);
  // pid 1 is no child of a test.
  EXPECT_FALSE(Subprocess::Adopt(1, false).ok());
  EXPECT_EQ(Subprocess::Adopt(0, false).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phos
