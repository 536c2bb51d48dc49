// The instance manager (docs/remoting.md): the function registry and the function processes
// ("instances") that serve invocations. Each instance is a process spawned with an invocation
// channel (PHOS_INVOKE_FD) and, when GPU sessions are wired, PHOS_GPU_SOCKET and
// PHOS_INSTANCE_TOKEN. An instance is ready when its SDK serve loop sends the ready frame (the
// pre-entry point). Invocations go to an idle instance, or queue while all are busy. An instance
// that times out is killed; one that dies or closes its channel mid-request is discarded; in both
// cases the function is topped up to its warm count again and the instance's GPU session ended.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/runtime/instance_registry.h"

namespace phos::runtime {

// What instances need from the API server: one session token per instance, for the number of
// GPUs its function declared (FunctionSpec::gpus), ended with the instance. phosd adapts
// ApiServer to this; tests run without GPU sessions.
class GpuSessions {
 public:
  virtual ~GpuSessions() = default;
  virtual std::string IssueToken(int gpus) = 0;
  virtual void EndSession(const std::string& token) = 0;
  // The path instances connect to (PHOS_GPU_SOCKET).
  virtual std::string SocketPath() const = 0;
};

struct InstanceManagerOptions {
  // Holds functions.json and logs/<name>-<pid>.log. Created if missing. Required.
  std::string data_dir;
  // Invocation deadline (queueing included) when the caller gives none. Default: 30000 ms.
  std::chrono::milliseconds invoke_timeout{30000};
  // Time from spawn to the ready frame before an instance is killed. Default: 60000 ms.
  std::chrono::milliseconds start_timeout{60000};
  // Time an instance gets to exit after its channel is closed (shutdown, removal) before it is
  // killed. Default: 2000 ms.
  std::chrono::milliseconds stop_grace{2000};
  // Delay before replacing an instance that failed to start; doubles per consecutive failure,
  // up to 30 s. Default: 500 ms.
  std::chrono::milliseconds restart_backoff{500};
  // GPU sessions for instances; nullptr runs instances without PHOS_GPU_SOCKET. Must outlive the
  // manager. Default: nullptr.
  GpuSessions* sessions = nullptr;
};

struct InvokeOutcome {
  enum class Kind {
    kOk,               // body is the function's response
    kFunctionError,    // the handler failed: error carries its code and message
    kInstanceLost,     // the instance died or closed its channel mid-request (discarded)
    kTimeout,          // the deadline passed (a busy instance was killed)
    kUnknownFunction,  // no such function, or it was removed while the request waited
    kStopping,         // the manager is shutting down
  };
  Kind kind = Kind::kOk;
  std::string body;
  Status error;
};

struct FunctionStatus {
  FunctionSpec spec;
  int starting = 0;  // spawned, not yet ready
  int idle = 0;
  int busy = 0;
  size_t queued = 0;
};

class InstanceManager {
 public:
  // Loads <data_dir>/functions.json and starts each function's warm instances.
  static Result<std::unique_ptr<InstanceManager>> Open(const InstanceManagerOptions& options);
  // Shutdown()s.
  ~InstanceManager();
  InstanceManager(const InstanceManager&) = delete;
  InstanceManager& operator=(const InstanceManager&) = delete;

  // Validates, persists and starts spec.instances warm instances. AlreadyExists for a taken name.
  Status Register(const FunctionSpec& spec);
  // Forgets the function, fails its queued invocations (kUnknownFunction) and stops its
  // instances once their current request is answered. NotFound for an unknown name.
  Status Remove(const std::string& name);
  std::vector<FunctionStatus> List() const;

  // Runs `request` on an instance of `name`; `done` is called exactly once, from a manager
  // thread (or the caller's, for an unknown function). timeout 0 = options.invoke_timeout.
  void Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout,
              std::function<void(InvokeOutcome)> done);

  // Fails queued invocations (kStopping), closes every instance's channel, waits for them to
  // exit (killing those past stop_grace), ends their GPU sessions. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit InstanceManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace phos::runtime
