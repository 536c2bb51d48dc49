// The fork template backend: phosd's side of the fork/forked frames (instance_channel.h); the
// template's side is the SDK's serve loop (functions/sdk/src/fork_template.cc).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cpu_state_internal.h"
#include "instance_process.h"
#include "phos/base/log.h"
#include "phos/base/subprocess.h"
#include "phos/runtime/cpu_state.h"

namespace phos::runtime {
namespace {

// The pid (in phosd's PID namespace) of the process a pidfd refers to; <= 0 when it has ended or
// the descriptor is no pidfd.
pid_t PidOfPidfd(int pidfd) {
  std::ifstream info("/proc/self/fdinfo/" + std::to_string(pidfd));
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("Pid:", 0) == 0) return static_cast<pid_t>(std::strtol(line.c_str() + 4, nullptr, 10));
  }
  return 0;
}

}  // namespace

Result<std::unique_ptr<ForkTemplateBackend>> ForkTemplateBackend::Create(const ForkTemplateOptions& options) {
  PHOS_RETURN_IF_ERROR(cpu_state_internal::BecomeSubreaper());
  return std::unique_ptr<ForkTemplateBackend>(new ForkTemplateBackend(options));
}

ForkTemplateBackend::~ForkTemplateBackend() {
  std::map<std::string, std::shared_ptr<Template>> templates;
  {
    std::lock_guard lock(mu_);
    templates.swap(templates_);
  }
  for (auto& [id, t] : templates) {
    close(t->process.channel_fd);
    EndInstanceProcess(t->process.pid, options_.release_grace);
  }
}

Result<CpuStateRef> ForkTemplateBackend::Capture(ParkedProcess process) {
  if (process.pid <= 0 || process.channel_fd < 0) {
    if (process.channel_fd >= 0) close(process.channel_fd);
    return Status::InvalidArgument("fork template: no process to park (pid " + std::to_string(process.pid) +
                                   ")");
  }
  auto t = std::make_shared<Template>();
  t->process = std::move(process);
  std::lock_guard lock(mu_);
  CpuStateRef ref{std::string(name()), "template-" + std::to_string(++next_id_)};
  PHOS_LOG(Info, "cpu-state", "{}: pid {} parked as a fork template", ref.id, t->process.pid);
  templates_[ref.id] = std::move(t);
  return ref;
}

std::shared_ptr<ForkTemplateBackend::Template> ForkTemplateBackend::Find(const CpuStateRef& ref) {
  std::lock_guard lock(mu_);
  auto it = templates_.find(ref.id);
  return it == templates_.end() ? nullptr : it->second;
}

Result<SpawnedProcess> ForkTemplateBackend::Spawn(const CpuStateRef& ref,
                                                  const ipc::invoke::EnvList& session_env) {
  if (ref.backend != name())
    return Status::InvalidArgument("fork template: ref of backend '" + ref.backend + "'");
  std::shared_ptr<Template> t = Find(ref);
  if (t == nullptr) return Status::NotFound("fork template '" + ref.id + "' is not parked here");
  Result<std::string> env = ipc::invoke::EncodeEnv(session_env);
  if (!env.ok()) return env.status();
  bool has_token = false;
  for (const auto& [k, v] : session_env) has_token |= k == "PHOS_INSTANCE_TOKEN" && !v.empty();
  if (!has_token)
    return Status::InvalidArgument("fork template: session variables without PHOS_INSTANCE_TOKEN");

  std::lock_guard lock(t->mu);
  const std::string who = "fork " + ref.id + " (pid " + std::to_string(t->process.pid) + ")";
  bool unusable = false;
  Result<SpawnedProcess> spawned =
      ForkOver(t->process.channel_fd, ipc::invoke::FrameKind::kFork, *env, who, t->process.log_path, &unusable);
  // An answer may still come and would be taken for the next fork's: this template is unusable.
  if (unusable) shutdown(t->process.channel_fd, SHUT_RDWR);
  if (spawned.ok()) PHOS_LOG(Info, "cpu-state", "{}: instance pid {}", who, spawned->pid);
  return spawned;
}

Result<SpawnedProcess> ForkTemplateBackend::ForkOver(int channel_fd, ipc::invoke::FrameKind kind,
                                                     std::string_view payload, const std::string& who,
                                                     const std::string& log_path, bool* unusable) {
  *unusable = false;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return Status::FromErrno(errno, "socketpair");
  Status sent = ipc::invoke::WriteFrameWithFd(channel_fd, kind, payload, sv[1]);
  close(sv[1]);
  if (!sent.ok()) {
    close(sv[0]);
    *unusable = true;
    return Status::Unavailable(who + ": " + sent.message());
  }
  pollfd p{channel_fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, static_cast<int>(options_.fork_timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    close(sv[0]);
    *unusable = true;
    return Status::Timeout(who + ": no answer within " + std::to_string(options_.fork_timeout.count()) +
                           " ms; its channel is no longer used");
  }
  int pidfd = -1;
  Result<ipc::invoke::Frame> answer = ipc::invoke::ReadFrame(channel_fd, nullptr, &pidfd);
  // A sandboxed process lives in a PID namespace of its own: the pid it names is the new
  // process's there, and phosd's is read from the pidfd that comes with it.
  const pid_t own_pid = pidfd >= 0 ? PidOfPidfd(pidfd) : 0;
  if (pidfd >= 0) ClosePidfd(pidfd);
  if (!answer.ok()) {
    close(sv[0]);
    *unusable = true;
    return Status::Unavailable(who + ": " + answer.status().message());
  }
  if (answer->kind == ipc::invoke::FrameKind::kError) {
    close(sv[0]);
    Status refusal = ipc::invoke::DecodeError(answer->payload);
    return Status(refusal.code(), who + ": " + refusal.message());
  }
  pid_t pid = 0;
  const std::string& text = answer->payload;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (answer->kind != ipc::invoke::FrameKind::kForked || ec != std::errc() || end != text.data() + text.size() ||
      pid <= 0) {
    close(sv[0]);
    *unusable = true;
    return Status::Corruption(who + ": answered frame kind " + std::to_string(static_cast<int>(answer->kind)) +
                              " '" + text + "' instead of forked <pid>; its channel is no longer used");
  }
  if (own_pid <= 0) {
    close(sv[0]);
    *unusable = true;
    return Status::Corruption(who + ": the forked frame came without a pidfd of a live process; its channel is no "
                              "longer used");
  }
  return SpawnedProcess{own_pid, sv[0], log_path};
}

Result<CpuStateRef> ForkTemplateBackend::CaptureRunning(const RunningProcess& instance) {
  if (instance.pid <= 0 || instance.channel_fd < 0) {
    return Status::InvalidArgument("fork template: no running instance to checkpoint (pid " +
                                   std::to_string(instance.pid) + ")");
  }
  const std::string who = "checkpoint of instance pid " + std::to_string(instance.pid);
  bool unusable = false;
  Result<SpawnedProcess> forked =
      ForkOver(instance.channel_fd, ipc::invoke::FrameKind::kCheckpoint, {}, who, instance.log_path, &unusable);
  if (!forked.ok()) {
    // A refusal leaves the instance as it was; a broken exchange leaves it for the caller to end.
    return unusable ? Status::Unavailable(forked.status().message()) : forked.status();
  }
  // The new template announces itself as a deployed process does at its entry point.
  auto fail = [&](const std::string& why) {
    close(forked->channel_fd);
    EndInstanceProcess(forked->pid, std::chrono::milliseconds(0));
    return Status::Unavailable(who + ": the new template " + why);
  };
  pollfd p{forked->channel_fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, static_cast<int>(options_.fork_timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return fail("did not announce itself within " + std::to_string(options_.fork_timeout.count()) + " ms");
  Result<ipc::invoke::Frame> hello = ipc::invoke::ReadFrame(forked->channel_fd);
  if (!hello.ok() || hello->kind != ipc::invoke::FrameKind::kReady) {
    return fail(hello.ok() ? "sent frame kind " + std::to_string(static_cast<int>(hello->kind)) + " before ready"
                           : "failed before its ready frame: " + hello.status().message());
  }
  return Capture(ParkedProcess{forked->pid, forked->channel_fd, forked->log_path});
}

Status ForkTemplateBackend::Release(const CpuStateRef& ref) {
  std::shared_ptr<Template> t;
  {
    std::lock_guard lock(mu_);
    auto it = templates_.find(ref.id);
    if (it == templates_.end() || ref.backend != name()) {
      return Status::NotFound("fork template '" + ref.id + "' is not parked here");
    }
    t = std::move(it->second);
    templates_.erase(it);
  }
  std::lock_guard lock(t->mu);
  // A closed channel ends the serve loop: the template exits by itself.
  close(t->process.channel_fd);
  std::string how = EndInstanceProcess(t->process.pid, options_.release_grace);
  PHOS_LOG(Info, "cpu-state", "{}: template pid {} released; {}", ref.id, t->process.pid, how);
  return Status::Ok();
}

}  // namespace phos::runtime
