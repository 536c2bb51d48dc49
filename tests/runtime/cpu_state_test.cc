// CPU-state backends: the fork template against a real SDK function (fork_counter_fn), the CRIU
// command line against a fake criu on PATH, and real criu where `criu check` passes.
#include "phos/runtime/cpu_state.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "instance_process.h"
#include "phos/base/subprocess.h"
#include "phos/ipc/instance_channel.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / ("phos-cpu-state-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Starts fork_counter_fn as the instance manager would and waits for its ready frame.
ParkedProcess StartParked(const fs::path& logs, std::vector<std::string> args = {}) {
  FunctionSpec spec;
  spec.name = "counter";
  spec.executable = PHOS_FORK_COUNTER_FN;
  spec.args = std::move(args);
  Result<InstanceProcess> proc = SpawnInstanceProcess(spec, logs.string(), {});
  EXPECT_TRUE(proc.ok()) << proc.status().ToString();
  if (!proc.ok()) return {};
  Result<ipc::invoke::Frame> ready = ipc::invoke::ReadFrame(proc->channel_fd);
  EXPECT_TRUE(ready.ok() && ready->kind == ipc::invoke::FrameKind::kReady);
  return ParkedProcess{proc->pid, proc->channel_fd, proc->log_path};
}

// One invocation; the answer's payload, or "error: <message>".
std::string Invoke(int fd, const std::string& request) {
  Status sent = ipc::invoke::WriteFrame(fd, ipc::invoke::FrameKind::kRequest, request);
  if (!sent.ok()) return "error: " + sent.ToString();
  Result<ipc::invoke::Frame> frame = ipc::invoke::ReadFrame(fd);
  if (!frame.ok()) return "error: " + frame.status().ToString();
  if (frame->kind == ipc::invoke::FrameKind::kError)
    return "error: " + ipc::invoke::DecodeError(frame->payload).message();
  return frame->payload;
}

ipc::invoke::EnvList SessionEnv(const std::string& token) {
  return {{"PHOS_GPU_SOCKET", "/nonexistent/gpu.sock"}, {"PHOS_INSTANCE_TOKEN", token}};
}

TEST(ForkTemplateTest, FiveInstancesServeIndependentlyAndTheTemplateKeepsForking) {
  fs::path logs = TempDir("fork");
  Result<std::unique_ptr<ForkTemplateBackend>> backend = ForkTemplateBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  ParkedProcess parked = StartParked(logs);
  ASSERT_GT(parked.pid, 0);
  const pid_t template_pid = parked.pid;
  Result<CpuStateRef> ref = (*backend)->Capture(parked);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_EQ(ref->backend, "fork-template");

  std::vector<SpawnedProcess> instances;
  for (int i = 0; i < 5; ++i) {
    Result<SpawnedProcess> spawned = (*backend)->Spawn(*ref, SessionEnv("token-" + std::to_string(i)));
    ASSERT_TRUE(spawned.ok()) << spawned.status().ToString();
    Result<ipc::invoke::Frame> ready = ipc::invoke::ReadFrame(spawned->channel_fd);
    ASSERT_TRUE(ready.ok() && ready->kind == ipc::invoke::FrameKind::kReady);
    instances.push_back(*spawned);
  }
  // Interleaved: instance i counts i + 1 times from the template's 100.
  for (int round = 0; round < 5; ++round) {
    for (int i = round; i < 5; ++i) {
      EXPECT_EQ(Invoke(instances[i].channel_fd, "count"), std::to_string(101 + round));
    }
  }
  for (int i = 0; i < 5; ++i) {
    const SpawnedProcess& inst = instances[i];
    EXPECT_NE(inst.pid, template_pid);
    EXPECT_EQ(Invoke(inst.channel_fd, "pid"), std::to_string(inst.pid));
    EXPECT_EQ(Invoke(inst.channel_fd, "env:PHOS_INSTANCE_TOKEN"), "token-" + std::to_string(i));
    EXPECT_EQ(Invoke(inst.channel_fd, "env:PHOS_GPU_SOCKET"), "/nonexistent/gpu.sock");
    EXPECT_EQ(getpgid(inst.pid), inst.pid);  // its own process group, ended as a group
  }
  // A sixth fork after the others served: the template's counter is untouched.
  Result<SpawnedProcess> sixth = (*backend)->Spawn(*ref, SessionEnv("token-6"));
  ASSERT_TRUE(sixth.ok()) << sixth.status().ToString();
  ASSERT_TRUE(ipc::invoke::ReadFrame(sixth->channel_fd).ok());
  EXPECT_EQ(Invoke(sixth->channel_fd, "count"), "101");
  instances.push_back(*sixth);

  // Instances are this process's children (subreaper): a closed channel ends each one cleanly.
  for (const SpawnedProcess& inst : instances) {
    close(inst.channel_fd);
    EXPECT_EQ(EndInstanceProcess(inst.pid, std::chrono::seconds(5)), "exited with code 0");
  }
  ASSERT_TRUE((*backend)->Release(*ref).ok());
  EXPECT_EQ(kill(template_pid, 0), -1);  // released: reaped
  EXPECT_EQ((*backend)->Spawn(*ref, SessionEnv("late")).status().code(), StatusCode::kNotFound);
  fs::remove_all(logs);
}

TEST(ForkTemplateTest, TemplateWithAThreadOfItsOwnIsRefused) {
  fs::path logs = TempDir("thread");
  Result<std::unique_ptr<ForkTemplateBackend>> backend = ForkTemplateBackend::Create({});
  ASSERT_TRUE(backend.ok());
  ParkedProcess parked = StartParked(logs, {"--extra-thread"});
  ASSERT_GT(parked.pid, 0);
  Result<CpuStateRef> ref = (*backend)->Capture(parked);
  ASSERT_TRUE(ref.ok());
  for (int attempt = 0; attempt < 2; ++attempt) {  // the template stays parked after a refusal
    Result<SpawnedProcess> spawned = (*backend)->Spawn(*ref, SessionEnv("t"));
    ASSERT_FALSE(spawned.ok());
    EXPECT_EQ(spawned.status().code(), StatusCode::kFailedPrecondition);
    // 2, or 3 where ThreadSanitizer started its own thread with the function's.
    EXPECT_NE(spawned.status().message().find(" threads at its entry point"), std::string::npos)
        << spawned.status().message();
  }
  EXPECT_TRUE((*backend)->Release(*ref).ok());
  fs::remove_all(logs);
}

// The frontend's host-function thread is stopped before the threads are counted; a frontend with
// host functions still pending keeps it, and the template is refused saying why.
TEST(ForkTemplateTest, TemplateWithHostFunctionsPendingIsRefused) {
  fs::path logs = TempDir("host-functions");
  Result<std::unique_ptr<ForkTemplateBackend>> backend = ForkTemplateBackend::Create({});
  ASSERT_TRUE(backend.ok());
  ParkedProcess parked = StartParked(logs, {"--pending-host-functions", "3"});
  ASSERT_GT(parked.pid, 0);
  Result<CpuStateRef> ref = (*backend)->Capture(parked);
  ASSERT_TRUE(ref.ok());
  Result<SpawnedProcess> spawned = (*backend)->Spawn(*ref, SessionEnv("t"));
  ASSERT_FALSE(spawned.ok());
  EXPECT_EQ(spawned.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(spawned.status().message().find("3 host functions (cudaLaunchHostFunc) are still pending"), std::string::npos)
      << spawned.status().message();
  EXPECT_TRUE((*backend)->Release(*ref).ok());
  fs::remove_all(logs);
}

// A checkpoint of a running instance (docs/design.md D10): the instance forks a template of its
// state as it is between two requests and serves on; the template's forks start from that state.
TEST(ForkTemplateTest, ACheckpointedInstanceServesOnAndItsTemplateForksFromItsState) {
  fs::path logs = TempDir("checkpoint");
  Result<std::unique_ptr<ForkTemplateBackend>> backend = ForkTemplateBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  ParkedProcess parked = StartParked(logs);
  ASSERT_GT(parked.pid, 0);
  Result<CpuStateRef> deployed = (*backend)->Capture(parked);
  ASSERT_TRUE(deployed.ok()) << deployed.status().ToString();
  Result<SpawnedProcess> running = (*backend)->Spawn(*deployed, SessionEnv("token-running"));
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  ASSERT_TRUE(ipc::invoke::ReadFrame(running->channel_fd).ok());
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Invoke(running->channel_fd, "count"), std::to_string(100 + i));

  Result<CpuStateRef> checkpoint =
      (*backend)->CaptureRunning({running->pid, running->channel_fd, running->log_path});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_NE(checkpoint->id, deployed->id);
  // The instance goes on from 103; so does every fork of the checkpoint, each on its own.
  EXPECT_EQ(Invoke(running->channel_fd, "count"), "104");
  EXPECT_EQ(Invoke(running->channel_fd, "env:PHOS_INSTANCE_TOKEN"), "token-running");
  std::vector<SpawnedProcess> forks;
  for (int i = 0; i < 2; ++i) {
    Result<SpawnedProcess> fork = (*backend)->Spawn(*checkpoint, SessionEnv("token-fork-" + std::to_string(i)));
    ASSERT_TRUE(fork.ok()) << fork.status().ToString();
    ASSERT_TRUE(ipc::invoke::ReadFrame(fork->channel_fd).ok());
    EXPECT_EQ(Invoke(fork->channel_fd, "count"), "104");
    EXPECT_EQ(Invoke(fork->channel_fd, "count"), "105");
    EXPECT_EQ(Invoke(fork->channel_fd, "env:PHOS_INSTANCE_TOKEN"), "token-fork-" + std::to_string(i));
    EXPECT_EQ(getpgid(fork->pid), fork->pid);
    forks.push_back(*fork);
  }
  // The deploy's template is untouched.
  Result<SpawnedProcess> fresh = (*backend)->Spawn(*deployed, SessionEnv("token-fresh"));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  ASSERT_TRUE(ipc::invoke::ReadFrame(fresh->channel_fd).ok());
  EXPECT_EQ(Invoke(fresh->channel_fd, "count"), "101");
  forks.push_back(*fresh);
  forks.push_back(*running);
  for (const SpawnedProcess& p : forks) {
    close(p.channel_fd);
    EXPECT_EQ(EndInstanceProcess(p.pid, std::chrono::seconds(5)), "exited with code 0");
  }
  EXPECT_TRUE((*backend)->Release(*checkpoint).ok());
  EXPECT_EQ((*backend)->Spawn(*checkpoint, SessionEnv("late")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE((*backend)->Release(*deployed).ok());
  fs::remove_all(logs);
}

// A running instance that cannot be forked (a thread of its own, host functions pending) is
// refused saying why, and serves on as if nothing was asked.
TEST(ForkTemplateTest, ARunningInstanceThatCannotForkIsRefusedAndServesOn) {
  fs::path logs = TempDir("checkpoint-refused");
  Result<std::unique_ptr<ForkTemplateBackend>> backend = ForkTemplateBackend::Create({});
  ASSERT_TRUE(backend.ok());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--extra-thread"}, " threads at the checkpoint"},
      {{"--pending-host-functions", "2"}, "2 host functions (cudaLaunchHostFunc) are still pending at the checkpoint"},
  };
  for (const auto& [args, why] : cases) {
    SCOPED_TRACE(args[0]);
    ParkedProcess instance = StartParked(logs, args);  // spawned and ready: a running instance, idle
    ASSERT_GT(instance.pid, 0);
    EXPECT_EQ(Invoke(instance.channel_fd, "count"), "101");
    Result<CpuStateRef> refused = (*backend)->CaptureRunning({instance.pid, instance.channel_fd, instance.log_path});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find(why), std::string::npos) << refused.status().message();
    EXPECT_EQ(Invoke(instance.channel_fd, "count"), "102");
    close(instance.channel_fd);
    EXPECT_EQ(EndInstanceProcess(instance.pid, std::chrono::seconds(5)), "exited with code 0");
  }
  // No running instance to ask.
  EXPECT_EQ((*backend)->CaptureRunning({-1, -1, ""}).status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(logs);
}

// What a checkpoint's instance answers is the tenant's word: every malformed or missing answer
// gets a clear error, saying when the instance is lost (its channel no longer trusted), and
// nothing the answer names is parked as a template.
TEST(ForkTemplateTest, HostileAnswersToACheckpointAreRefused) {
  Result<std::unique_ptr<ForkTemplateBackend>> backend =
      ForkTemplateBackend::Create({.fork_timeout = std::chrono::milliseconds(300)});
  ASSERT_TRUE(backend.ok());
  // A process a hostile answer can name by pidfd: this test's child, ended by the backend when the
  // "template" it stands for never announces itself.
  auto sleeper = [] {
    pid_t pid = fork();
    if (pid == 0) {
      execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
      _exit(127);
    }
    return pid;
  };
  struct Case {
    const char* name;
    // Answers the checkpoint frame read from `fd` (its passed descriptor `passed`, owned).
    std::function<void(int fd, int passed)> answer;
    StatusCode code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"silence", [](int, int passed) { close(passed); }, StatusCode::kUnavailable, "no answer within 300 ms"},
      {"a response instead", [](int fd, int passed) {
         close(passed);
         ASSERT_TRUE(ipc::invoke::WriteFrame(fd, ipc::invoke::FrameKind::kResponse, "hello").ok());
       }, StatusCode::kUnavailable, "instead of forked <pid>"},
      {"forked without a pidfd", [](int fd, int passed) {
         close(passed);
         ASSERT_TRUE(ipc::invoke::WriteFrame(fd, ipc::invoke::FrameKind::kForked, "1").ok());
       }, StatusCode::kUnavailable, "without a pidfd"},
      {"forked with a pid that is no number", [](int fd, int passed) {
         close(passed);
         ASSERT_TRUE(ipc::invoke::WriteFrame(fd, ipc::invoke::FrameKind::kForked, "12x").ok());
       }, StatusCode::kUnavailable, "instead of forked <pid>"},
      {"a refusal", [](int fd, int passed) {
         close(passed);
         ASSERT_TRUE(ipc::invoke::WriteFrame(fd, ipc::invoke::FrameKind::kError,
                                             ipc::invoke::EncodeError(Status::FailedPrecondition("not now")))
                         .ok());
       }, StatusCode::kFailedPrecondition, "not now"},
      {"a template that never announces itself", [&sleeper](int fd, int passed) {
         const pid_t pid = sleeper();
         const int pidfd = PidfdOpen(pid);
         ASSERT_GE(pidfd, 0);
         ASSERT_TRUE(ipc::invoke::WriteFrameWithFd(fd, ipc::invoke::FrameKind::kForked, std::to_string(pid), pidfd).ok());
         ClosePidfd(pidfd);
         close(passed);  // the new template's channel closes before its ready frame
       }, StatusCode::kUnavailable, "failed before its ready frame"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    std::thread instance([&] {
      int passed = -1;
      Result<ipc::invoke::Frame> frame = ipc::invoke::ReadFrame(sv[1], nullptr, &passed);
      ASSERT_TRUE(frame.ok()) << frame.status().ToString();
      EXPECT_EQ(frame->kind, ipc::invoke::FrameKind::kCheckpoint);
      EXPECT_TRUE(frame->payload.empty());
      ASSERT_GE(passed, 0);
      c.answer(sv[1], passed);
    });
    Result<CpuStateRef> got = (*backend)->CaptureRunning({getpid(), sv[0], "/dev/null"});
    instance.join();
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), c.code) << got.status().ToString();
    EXPECT_NE(got.status().message().find(c.says), std::string::npos) << got.status().ToString();
    close(sv[0]);
    close(sv[1]);
  }
}

TEST(ForkTemplateTest, BadInputGetsClearErrors) {
  Result<std::unique_ptr<ForkTemplateBackend>> backend = ForkTemplateBackend::Create({});
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ((*backend)->Capture(ParkedProcess{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*backend)->Spawn({"fork-template", "template-999"}, SessionEnv("t")).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ((*backend)->Release({"fork-template", "template-999"}).code(), StatusCode::kNotFound);

  fs::path logs = TempDir("bad");
  Result<CpuStateRef> ref = (*backend)->Capture(StartParked(logs));
  ASSERT_TRUE(ref.ok());
  Result<SpawnedProcess> no_token = (*backend)->Spawn(*ref, {{"PHOS_GPU_SOCKET", "/x"}});
  EXPECT_EQ(no_token.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_token.status().message().find("PHOS_INSTANCE_TOKEN"), std::string::npos);
  EXPECT_EQ((*backend)->Spawn({"criu", ref->id}, SessionEnv("t")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*backend)->Release(*ref).ok());
  fs::remove_all(logs);
}

// ---- CRIU ----

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Puts tests/runtime/fake_criu.sh first in PATH as `criu` for the test's life.
class FakeCriuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("fake-criu");
    fs::create_directories(dir_ / "bin");
    fs::create_symlink(PHOS_FAKE_CRIU, dir_ / "bin" / "criu");
    const char* path = getenv("PATH");
    old_path_ = path != nullptr ? path : "";
    setenv("PATH", ((dir_ / "bin").string() + ":" + old_path_).c_str(), 1);
    setenv("FAKE_CRIU_LOG", (dir_ / "calls.log").c_str(), 1);
  }
  void TearDown() override {
    setenv("PATH", old_path_.c_str(), 1);
    for (const char* name : {"FAKE_CRIU_LOG", "FAKE_CRIU_CHECK_EXIT", "FAKE_CRIU_RESTORE_EXIT"})
      unsetenv(name);
    fs::remove_all(dir_);
  }
  std::unique_ptr<CriuBackend> Backend() {
    CriuOptions options;
    options.images_dir = (dir_ / "images").string();
    Result<std::unique_ptr<CriuBackend>> backend = CriuBackend::Create(options);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? std::move(*backend) : nullptr;
  }
  std::vector<std::string> Calls() {
    std::vector<std::string> lines;
    std::istringstream in(ReadText(dir_ / "calls.log"));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  fs::path dir_;
  std::string old_path_;
};

TEST_F(FakeCriuTest, DumpAndRestoreCommandLines) {
  std::unique_ptr<CriuBackend> backend = Backend();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(backend->Available().ok());
  ParkedProcess parked = StartParked(dir_);
  ASSERT_GT(parked.pid, 0);
  const pid_t dumped_pid = parked.pid;
  Result<CpuStateRef> ref = backend->Capture(parked);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  fs::path images = dir_ / "images" / ref->id;
  EXPECT_TRUE(fs::exists(images / "core.img"));
  std::string key = ReadText(images / "channel-key");
  ASSERT_EQ(key.rfind("socket:[", 0), 0u) << key;
  key.pop_back();  // newline

  Result<SpawnedProcess> spawned = backend->Spawn(*ref, SessionEnv("restored"));
  ASSERT_TRUE(spawned.ok()) << spawned.status().ToString();
  // The fake wrote `ready` on the descriptor criu was given in place of the dumped channel.
  Result<ipc::invoke::Frame> ready = ipc::invoke::ReadFrame(spawned->channel_fd);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(ready->kind, ipc::invoke::FrameKind::kReady);
  EXPECT_GT(spawned->pid, 0);
  close(spawned->channel_fd);
  // The fake's sleeper is no group leader, which EndInstanceProcess signals: kill it first.
  ASSERT_EQ(kill(spawned->pid, SIGKILL), 0);
  EXPECT_EQ(EndInstanceProcess(spawned->pid, std::chrono::milliseconds(0)), "killed by signal 9 (Killed)");

  std::vector<std::string> calls = Calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0], "check");
  EXPECT_EQ(calls[1], "dump -t " + std::to_string(dumped_pid) + " -D " + images.string() +
                          " --shell-job --ext-unix-sk -v2 -o dump.log");
  EXPECT_EQ(calls[2].rfind("restore -D " + images.string() +
                               " --shell-job --ext-unix-sk --restore-detached --inherit-fd fd[3]:" + key +
                               " --pidfile " + (images / "restore-").string(),
                           0),
            0u)
      << calls[2];
  EXPECT_TRUE(backend->Release(*ref).ok());
  EXPECT_FALSE(fs::exists(images));
  EXPECT_EQ(backend->Release(*ref).code(), StatusCode::kNotFound);
  EXPECT_EQ(backend->Release({"criu", "../escape"}).code(), StatusCode::kInvalidArgument);
}

TEST_F(FakeCriuTest, FailedCheckIsReportedWithCriusReasonAndRefusesCaptures) {
  setenv("FAKE_CRIU_CHECK_EXIT", "1", 1);
  std::unique_ptr<CriuBackend> backend = Backend();
  ASSERT_NE(backend, nullptr);
  Status available = backend->Available();
  EXPECT_EQ(available.code(), StatusCode::kNotSupported);
  EXPECT_NE(available.message().find("Unexpected rt vDSO area bounds"), std::string::npos)
      << available.message();
  ParkedProcess parked = StartParked(dir_);
  const pid_t pid = parked.pid;
  EXPECT_EQ(backend->Capture(parked).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(kill(pid, 0), -1);  // the process handed over was ended and reaped
  EXPECT_EQ(backend->Spawn({"criu", "criu-1"}, SessionEnv("t")).status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(Calls().size(), 1u);  // checked once
}

TEST_F(FakeCriuTest, FailedRestoreCarriesCriusError) {
  std::unique_ptr<CriuBackend> backend = Backend();
  ASSERT_NE(backend, nullptr);
  Result<CpuStateRef> ref = backend->Capture(StartParked(dir_));
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  setenv("FAKE_CRIU_RESTORE_EXIT", "3", 1);
  Result<SpawnedProcess> spawned = backend->Spawn(*ref, SessionEnv("t"));
  EXPECT_EQ(spawned.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(spawned.status().message().find("exit 3: Error (criu/cr-restore.c:1): fake restore failure"),
            std::string::npos)
      << spawned.status().message();
  EXPECT_EQ(backend->Spawn({"criu", "criu-missing"}, SessionEnv("t")).status().code(), StatusCode::kNotFound);
}

TEST(CriuTest, RealCriuRoundTripWhereCheckPasses) {
  fs::path dir = TempDir("criu");
  CriuOptions options;
  options.images_dir = (dir / "images").string();
  Result<std::unique_ptr<CriuBackend>> backend = CriuBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  if (Status s = (*backend)->Available(); !s.ok()) {
    fs::remove_all(dir);
    GTEST_SKIP() << s.message();
  }
  ParkedProcess parked = StartParked(dir);
  ASSERT_GT(parked.pid, 0);
  // One request before the dump: the restored process continues from its counter.
  EXPECT_EQ(Invoke(parked.channel_fd, "count"), "101");
  Result<CpuStateRef> ref = (*backend)->Capture(parked);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  Result<SpawnedProcess> spawned = (*backend)->Spawn(*ref, SessionEnv("restored"));
  ASSERT_TRUE(spawned.ok()) << spawned.status().ToString();
  Result<ipc::invoke::Frame> ready = ipc::invoke::ReadFrame(spawned->channel_fd);
  ASSERT_TRUE(ready.ok() && ready->kind == ipc::invoke::FrameKind::kReady);
  EXPECT_EQ(Invoke(spawned->channel_fd, "count"), "102");
  EXPECT_EQ(Invoke(spawned->channel_fd, "env:PHOS_INSTANCE_TOKEN"), "restored");
  close(spawned->channel_fd);
  EndInstanceProcess(spawned->pid, std::chrono::seconds(5));
  EXPECT_TRUE((*backend)->Release(*ref).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace phos::runtime
