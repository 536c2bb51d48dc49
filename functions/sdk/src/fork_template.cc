#include "fork_template.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "phos/base/log.h"
#include "phos/base/sanitizers.h"
#include "phos/base/subprocess.h"
#include "phos/ipc/instance_channel.h"

namespace phos::fn::detail {
namespace {

namespace invoke = phos::ipc::invoke;

constexpr const char* kTokenEnv = "PHOS_INSTANCE_TOKEN";
// Set by phosd when the template's GPU state was captured into a snapshot that the new instance's
// session restores: the template's device pointers are then valid in the child.
constexpr const char* kSnapshotEnv = "PHOS_SNAPSHOT_VERSION";

// Threads of the process that are not the function's: ThreadSanitizer's background thread, in a
// build with it (started in every process, and again in a fork's child).
constexpr int kRuntimeThreads = kThreadSanitizer ? 1 : 0;

// Why this process cannot be forked now, or an empty string. `restored`: the child's session
// restores the template's GPU state, so its allocations are no reason to refuse.
// `role` says when the fork was asked for: at the entry point, or at a checkpoint.
std::string ForkRefusal(bool restored, ForkRole role) {
  const std::string where = role == ForkRole::kInstance ? "at its entry point" : "at the checkpoint";
  // Looked up, not linked: functions without CUDA do not load the frontend. Its one thread runs
  // host functions while any are pending: stopped first, so that every thread counted below is
  // the function's.
  using QuiesceFn = size_t (*)();
  auto quiesce = reinterpret_cast<QuiesceFn>(dlsym(RTLD_DEFAULT, "__phosQuiesce"));
  if (quiesce != nullptr) {
    if (size_t n = quiesce(); n != 0) {
      return "fork template refused: " + std::to_string(n) +
             " host functions (cudaLaunchHostFunc) are still pending " + where +
             "; synchronise their streams before the handler returns";
    }
  }
  Result<int> threads = CountThreads();
  if (!threads.ok()) return "cannot count the template's threads: " + threads.status().message();
  // Only the calling thread survives fork(), and the others' state (locks, half-done work) would
  // be lost.
  const int own = *threads - kRuntimeThreads;
  if (own > 1) {
    return "fork template refused: the function has " + std::to_string(own) + " threads " + where +
           ", and only the calling thread survives a fork; " +
           (role == ForkRole::kInstance ? "start the function's threads in its handler, not before Serve()"
                                        : "end the threads a handler starts before it returns");
  }
  using LiveFn = size_t (*)();
  auto live = reinterpret_cast<LiveFn>(dlsym(RTLD_DEFAULT, "__phosLiveAllocations"));
  if (live != nullptr && !restored) {
    if (size_t n = live(); n != 0) {
      return "fork template refused: the function holds " + std::to_string(n) +
             " GPU allocations at its entry point; a template must hold no GPU memory";
    }
  }
  return {};
}

Status Answer(int fd, const Status& refusal) {
  PHOS_LOG(Warn, "fn", "{}", refusal.message());
  return invoke::WriteFrame(fd, invoke::FrameKind::kError, invoke::EncodeError(refusal));
}

// Reads the whole pipe message of the intermediate process: the instance's pid or -errno.
long ReadForkedPid(int fd) {
  long value = 0;
  size_t done = 0;
  auto* p = reinterpret_cast<char*>(&value);
  while (done < sizeof(value)) {
    ssize_t n = read(fd, p + done, sizeof(value) - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -EPIPE;
    done += static_cast<size_t>(n);
  }
  return value;
}

}  // namespace

Result<int> CountThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return Status::FromErrno(errno, "open /proc/self/task");
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

Status AdoptSession(std::string_view payload) {
  Result<invoke::EnvList> env = invoke::DecodeEnv(payload);
  if (!env.ok()) return env.status();
  const std::string* token = nullptr;
  for (const auto& [name, value] : *env) {
    if (name == kTokenEnv) token = &value;
  }
  if (token == nullptr || token->empty()) {
    return Status::InvalidArgument(std::string("session variables without ") + kTokenEnv);
  }
  for (const auto& [name, value] : *env) setenv(name.c_str(), value.c_str(), 1);
  using ForkChildFn = int (*)(const char*);
  auto fork_child = reinterpret_cast<ForkChildFn>(dlsym(RTLD_DEFAULT, "__phosForkChild"));
  if (fork_child != nullptr && fork_child(token->c_str()) != 0) {
    return Status::Internal("the CUDA frontend could not drop the inherited GPU session");
  }
  return Status::Ok();
}

Status DetachSession() {
  unsetenv(kTokenEnv);
  using DetachFn = int (*)();
  auto detach = reinterpret_cast<DetachFn>(dlsym(RTLD_DEFAULT, "__phosDetachSession"));
  if (detach != nullptr && detach() != 0) {
    return Status::Internal("the CUDA frontend could not drop the inherited GPU session");
  }
  return Status::Ok();
}

Result<ForkOutcome> HandleFork(int channel_fd, std::string_view payload, int passed_fd, ForkRole role) {
  ForkOutcome outcome;
  const char* frame = role == ForkRole::kInstance ? "fork" : "checkpoint";
  if (passed_fd < 0) {
    PHOS_RETURN_IF_ERROR(
        Answer(channel_fd, Status::InvalidArgument(std::string(frame) + " frame without a channel descriptor")));
    return outcome;
  }
  // A new template keeps this instance's GPU state: phosd captures the session at the same point,
  // and the template's forks restore that snapshot, so its allocations stay valid in them.
  bool restored = role == ForkRole::kTemplate;
  if (role == ForkRole::kInstance) {
    Result<invoke::EnvList> env = invoke::DecodeEnv(payload);
    if (!env.ok()) {
      close(passed_fd);
      PHOS_RETURN_IF_ERROR(Answer(channel_fd, env.status()));
      return outcome;
    }
    for (const auto& [name, value] : *env) restored |= name == kSnapshotEnv && !value.empty();
  } else if (!payload.empty()) {
    close(passed_fd);
    PHOS_RETURN_IF_ERROR(Answer(channel_fd, Status::InvalidArgument("a checkpoint frame carries no payload")));
    return outcome;
  }
  if (std::string why = ForkRefusal(restored, role); !why.empty()) {
    close(passed_fd);
    PHOS_RETURN_IF_ERROR(Answer(channel_fd, Status::FailedPrecondition(why)));
    return outcome;
  }
  int pid_pipe[2];
  if (pipe2(pid_pipe, O_CLOEXEC) != 0) {
    Status s = Status::FromErrno(errno, "fork template: pipe");
    close(passed_fd);
    PHOS_RETURN_IF_ERROR(Answer(channel_fd, s));
    return outcome;
  }
  // Buffered output would otherwise be written once by each process.
  std::fflush(stdout);
  std::fflush(stderr);
  // Double fork: the instance is orphaned at once and reparented to phosd, which makes itself a
  // child subreaper (ForkTemplateBackend), so phosd can wait for and signal it like a process it
  // spawned; the template never collects instances.
  pid_t middle = fork();
  if (middle == 0) {
    pid_t instance = fork();
    if (instance != 0) {
      long message = instance > 0 ? static_cast<long>(instance) : -static_cast<long>(errno);
      ssize_t ignored = write(pid_pipe[1], &message, sizeof(message));
      (void)ignored;
      _exit(0);
    }
    close(pid_pipe[0]);
    close(pid_pipe[1]);
    close(channel_fd);
    // Its own process group: phosd ends an instance (and a template) by signalling its group.
    setpgid(0, 0);
    Status adopted = role == ForkRole::kInstance ? AdoptSession(payload) : DetachSession();
    if (adopted.ok()) {
      std::string fd_text = std::to_string(passed_fd);
      setenv(invoke::kInvokeFdEnv, fd_text.c_str(), 1);
      adopted = invoke::WriteFrame(passed_fd, invoke::FrameKind::kReady, invoke::kReadyCapabilities);
    }
    if (!adopted.ok()) {
      PHOS_LOG(Error, "fn", "forked {} pid {} cannot start: {}",
               role == ForkRole::kInstance ? "instance" : "template", getpid(), adopted.ToString());
      _exit(2);
    }
    if (role == ForkRole::kInstance) {
      PHOS_LOG(Info, "fn", "pid {} forked from the template; waiting for its first request", getpid());
    } else {
      PHOS_LOG(Info, "fn", "pid {} keeps a checkpoint of its instance as a template", getpid());
    }
    outcome.in_child = true;
    outcome.channel_fd = passed_fd;
    return outcome;
  }
  close(pid_pipe[1]);
  close(passed_fd);
  Status answer;
  if (middle < 0) {
    answer = Status::FromErrno(errno, "fork template: fork");
  } else {
    long instance = ReadForkedPid(pid_pipe[0]);
    while (waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (instance <= 0) answer = Status::FromErrno(static_cast<int>(-instance), "fork template: second fork");
    if (answer.ok()) {
      PHOS_LOG(Info, "fn", "pid {} forked {} pid {}", getpid(), role == ForkRole::kInstance ? "instance" : "template",
               instance);
      close(pid_pipe[0]);
      // In a sandbox's PID namespace the pid means nothing to phosd: a pidfd of the instance
      // goes with it, from which phosd reads the pid in its own namespace.
      int pidfd = PidfdOpen(static_cast<pid_t>(instance));
      Status sent = pidfd >= 0 ? invoke::WriteFrameWithFd(channel_fd, invoke::FrameKind::kForked,
                                                          std::to_string(instance), pidfd)
                               : invoke::WriteFrame(channel_fd, invoke::FrameKind::kForked, std::to_string(instance));
      if (pidfd >= 0) ClosePidfd(pidfd);
      PHOS_RETURN_IF_ERROR(sent);
      return outcome;
    }
  }
  close(pid_pipe[0]);
  PHOS_RETURN_IF_ERROR(Answer(channel_fd, answer));
  return outcome;
}

}  // namespace phos::fn::detail
