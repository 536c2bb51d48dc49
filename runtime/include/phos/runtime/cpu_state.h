// CPU state of a deployed function (docs/design.md D9) and of a checkpointed instance (D10): one
// interface, two backends.
//
// - ForkTemplateBackend (the default): the deployed process stays parked at its pre-entry point
//   holding no GPU memory; each new instance is forked from it (the `fork` frame of
//   instance_channel.h) and connects to phosd as a new GPU session. A checkpoint of a running
//   instance forks the instance itself (the `checkpoint` frame): the fork is parked the same way.
// - CriuBackend: `criu dump` of the parked process into an images directory, `criu restore` of
//   it per instance; used only when `criu check` passes (Available()).
//
// Both make phosd a child subreaper (prctl PR_SET_CHILD_SUBREAPER) when created: a forked or
// restored instance is orphaned at birth and becomes phosd's child, so the instance manager waits
// for and ends it like a process it spawned (EndInstanceProcess). The instance manager's deploy,
// restores and checkpoints use them (instance_deploy.cc, instance_checkpoint.cc).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "phos/base/status.h"
#include "phos/ipc/instance_channel.h"

namespace phos::runtime {

// A function process that has sent `ready` on its invocation channel (its pre-entry point).
struct ParkedProcess {
  pid_t pid = -1;
  int channel_fd = -1;  // phosd's end of the invocation channel; owned by Capture from then on
  std::string log_path;
};

// A running instance whose CPU state a checkpoint keeps (docs/design.md D10). Borrowed: the
// instance and its channel stay the caller's, and the caller holds it idle (no request in flight)
// until CaptureRunning returns.
struct RunningProcess {
  pid_t pid = -1;
  int channel_fd = -1;  // phosd's end of the instance's invocation channel
  std::string log_path;
};

// A captured CPU state: the backend that holds it and its id there.
struct CpuStateRef {
  std::string backend;
  std::string id;
};

// A new instance made from a captured state. The first frame on its channel is `ready` when it
// started (or `error`, or a close, when it could not).
struct SpawnedProcess {
  pid_t pid = -1;
  int channel_fd = -1;  // phosd's end, the caller's to close
  std::string log_path;
};

class CpuStateBackend {
 public:
  virtual ~CpuStateBackend() = default;
  virtual std::string_view name() const = 0;
  // Takes the parked process over (success or not) and captures its CPU state.
  virtual Result<CpuStateRef> Capture(ParkedProcess process) = 0;
  // Captures the CPU state of a running instance as it is now, the instance running on; kept and
  // spawned from like a captured parked process. Its GPU session is not part of it: the caller
  // captures that at the same point.
  virtual Result<CpuStateRef> CaptureRunning(const RunningProcess& instance) = 0;
  // A new process from `ref`, given the GPU-session variables it runs with (PHOS_GPU_SOCKET,
  // PHOS_INSTANCE_TOKEN: the token is required).
  virtual Result<SpawnedProcess> Spawn(const CpuStateRef& ref, const ipc::invoke::EnvList& session_env) = 0;
  // Forgets `ref` and frees what holds it (the template process, the images).
  virtual Status Release(const CpuStateRef& ref) = 0;
};

struct ForkTemplateOptions {
  // How long a template may take to answer a fork frame. Default: 10 s.
  std::chrono::milliseconds fork_timeout{10000};
  // How long a released template may take to exit after its channel closes before it is killed.
  // Default: 2 s.
  std::chrono::milliseconds release_grace{2000};
};

class ForkTemplateBackend final : public CpuStateBackend {
 public:
  static Result<std::unique_ptr<ForkTemplateBackend>> Create(const ForkTemplateOptions& options);
  ~ForkTemplateBackend() override;  // releases every template

  std::string_view name() const override { return "fork-template"; }
  // The template stays the caller's process that it was, parked in its serve loop; the ref names it.
  Result<CpuStateRef> Capture(ParkedProcess process) override;
  // The instance forks (a checkpoint frame): the fork, parked in its serve loop on a channel of its
  // own, is the template. Refused like a fork (threads of its own, host functions pending) with
  // FailedPrecondition, the instance serving on unharmed. Unavailable when the instance's channel
  // broke or can no longer be trusted (no answer, a malformed one): the caller ends the instance.
  Result<CpuStateRef> CaptureRunning(const RunningProcess& instance) override;
  // Forks once; a template that refuses (threads of its own, live GPU allocations) gives
  // FailedPrecondition with its reason, and stays usable for a later attempt.
  Result<SpawnedProcess> Spawn(const CpuStateRef& ref, const ipc::invoke::EnvList& session_env) override;
  Status Release(const CpuStateRef& ref) override;

 private:
  struct Template {
    std::mutex mu;  // one fork frame in flight per template channel
    ParkedProcess process;
  };
  explicit ForkTemplateBackend(const ForkTemplateOptions& options) : options_(options) {}
  std::shared_ptr<Template> Find(const CpuStateRef& ref);
  // Sends `kind` (fork or checkpoint) with a fresh channel's end over `channel_fd` and reads the
  // `forked` answer: the new process (pid in phosd's namespace) and phosd's end of its channel.
  // `*unusable` is set when the channel can no longer be trusted (an answer missing or malformed).
  Result<SpawnedProcess> ForkOver(int channel_fd, ipc::invoke::FrameKind kind, std::string_view payload,
                                  const std::string& who, const std::string& log_path, bool* unusable);

  ForkTemplateOptions options_;
  std::mutex mu_;
  uint64_t next_id_ = 0;
  std::map<std::string, std::shared_ptr<Template>> templates_;
};

struct CriuOptions {
  // The criu executable, searched in PATH when it has no slash. Default: "criu".
  std::string criu = "criu";
  // Where captures go, one subdirectory each (created if missing). Required.
  std::string images_dir;
  // The invocation channel's descriptor number inside the function (SpawnInstanceProcess gives
  // it 3). Default: 3.
  int function_channel_fd = 3;
  // Limit for one criu command. Default: 60 s.
  std::chrono::milliseconds command_timeout{60000};
};

class CriuBackend final : public CpuStateBackend {
 public:
  static Result<std::unique_ptr<CriuBackend>> Create(const CriuOptions& options);

  // Runs `criu check` the first time and keeps its verdict: Ok, or NotSupported carrying criu's
  // own reason (on kernels whose vDSO criu 3.17 cannot parse: "vdso: Unexpected rt vDSO area
  // bounds"). Capture and Spawn refuse with it.
  Status Available();

  std::string_view name() const override { return "criu"; }
  // `criu dump` (the process ends with the dump); its channel's socket is recorded with the images.
  Result<CpuStateRef> Capture(ParkedProcess process) override;
  // Not built yet (NotSupported): it would be `criu dump --leave-running` of an instance whose GPU
  // session is live.
  Result<CpuStateRef> CaptureRunning(const RunningProcess& instance) override;
  // `criu restore --restore-detached` with a fresh channel given in place of the dumped one
  // (--inherit-fd), then an `adopt` frame with the session variables. criu restores the dumped
  // pid, so one image gives one live instance at a time.
  Result<SpawnedProcess> Spawn(const CpuStateRef& ref, const ipc::invoke::EnvList& session_env) override;
  Status Release(const CpuStateRef& ref) override;

 private:
  explicit CriuBackend(const CriuOptions& options) : options_(options) {}
  Result<std::string> ImagesDir(const CpuStateRef& ref) const;

  CriuOptions options_;
  std::once_flag checked_;
  Status available_;
  std::mutex mu_;
  uint64_t next_id_ = 0;
};

}  // namespace phos::runtime
