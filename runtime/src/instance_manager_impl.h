// The instance manager's state and threads (private). One thread per instance runs its whole
// life: make the process (spawn, or fork from the function's template and restore its snapshot),
// wait for ready, serve invocations, end. One thread per deploy runs the function to its entry
// point and captures it. A supervisor thread tops functions up to their warm count, expires queued
// invocations, retries failed deploys and joins finished threads. One mutex guards all manager
// state; channel I/O and callbacks run outside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "instance_metrics.h"
#include "instance_process.h"
#include "phos/runtime/instance_manager.h"

namespace phos::runtime {

using Clock = std::chrono::steady_clock;

struct Invocation {
  std::string request;
  Clock::time_point deadline;
  std::function<void(InvokeOutcome)> done;
  Clock::time_point arrived;
  RestoreMode mode = RestoreMode::kAuto;
};

enum class InstanceState { kStarting, kIdle, kBusy };

struct Instance {
  uint64_t id = 0;
  InstanceState state = InstanceState::kStarting;
  bool extra = false;  // beyond the warm count: ends after keep_alive idle
  bool evict = false;  // asked to end once idle: a restore needs its instance range
  std::thread thread;
};

// One deployed instance range of a function: its snapshot there and the parked process it was
// captured from. Only one live instance can use it at a time (the memory must be at the
// snapshot's addresses), so a function has as many as its warm count.
struct Slot {
  int va_slot = -1;      // the API server's instance range
  uint64_t version = 0;  // the GPU snapshot; 0: the function holds no GPU state
  CpuStateRef cpu;
  uint64_t holder = 0;   // the instance living in it; 0: free
};

enum class DeployState {
  kNone,       // not deployed (no snapshot support): instances are spawned
  kDeploying,  // running to its entry point / being captured
  kDeployed,   // a template (and, with GPU state, a snapshot) to restore instances from
  kFailed,     // the last deploy failed: retried after a backoff
};

struct Function {
  FunctionSpec spec;
  bool removed = false;
  std::deque<Invocation> queue;
  std::condition_variable cv;  // queue non-empty, removed, or stopping
  std::vector<std::shared_ptr<Instance>> instances;
  Clock::time_point next_start{};
  int start_failures = 0;
  DeployState deploy = DeployState::kNone;
  std::vector<Slot> slots;         // deployed: one per instance it may run at once (MaxInstances)
  std::condition_variable slot_cv;  // a slot became free, removed, or stopping
  int slot_waiters = 0;             // restores waiting for a slot: warm top-ups wait for them
  bool learning = false;           // an instance is learning the first-touch order
  // Called once the deploy in progress ends (Deploy()).
  std::vector<std::function<void(Status)>> deployed_callbacks;
};

// What the first invocation of a new instance reports about how it was brought up.
struct StartReport {
  RestoreMode mode = RestoreMode::kWarm;
  std::string token;
  Clock::time_point ready;
  bool restored = false;  // GPU state from a snapshot
};

class InstanceManager::Impl {
 public:
  explicit Impl(InstanceManagerOptions options)
      : options_(std::move(options)), metrics_(options_.metrics_registry) {}
  ~Impl();

  Status Open();
  Status Register(const FunctionSpec& spec);
  // ValidateFunctionSpec, and a GPU count the node has (with GPU sessions).
  Status Validate(const FunctionSpec& spec) const;
  void Deploy(const FunctionSpec& spec, std::string sample_request, std::function<void(Status)> done);
  Status Remove(const std::string& name);
  std::vector<FunctionStatus> List() const;
  void Invoke(const std::string& name, std::string request, std::chrono::milliseconds timeout, RestoreMode mode,
              std::function<void(InvokeOutcome)> done);
  void Shutdown();

 private:
  bool SnapshotsEnabled() const {
    return options_.cpu_state != nullptr && options_.sessions != nullptr && options_.sessions->SupportsSnapshots();
  }
  // Adds the function (not persisted); the caller holds mu_.
  std::shared_ptr<Function> AddLocked(const FunctionSpec& spec);

  // ---- supervisor (instance_manager.cc) ----
  void Supervise();
  bool NeedsStartLocked(Clock::time_point now) const;
  void StartInstanceLocked(const std::shared_ptr<Function>& f, RestoreMode mode, std::optional<Invocation> first,
                           bool extra);
  void JoinFinishedLocked();
  int IdleLocked(const Function& f) const;
  int ExtraLocked(const Function& f) const;

  // ---- one instance's life (instance_manager.cc) ----
  void RunInstance(std::shared_ptr<Function> f, std::shared_ptr<Instance> inst, RestoreMode mode,
                   std::optional<Invocation> first);
  bool Serve(const std::shared_ptr<Function>& f, const std::shared_ptr<Instance>& inst, const FunctionSpec& spec,
             const InstanceProcess& proc, StartReport report, std::optional<Invocation> first, bool learning);
  // Runs one invocation; `before_answer` runs once the instance answered, before the caller is.
  bool Handle(const InstanceProcess& proc, const std::string& who, Invocation inv, const StartReport* report,
              const std::function<void()>& before_answer);
  Status SaveLocked();

  // ---- deploy and restore (instance_deploy.cc) ----
  // Starts the deploy thread of `f` (deploy kDeploying); the caller holds mu_.
  void StartDeployLocked(const std::shared_ptr<Function>& f, std::string sample_request);
  void RunDeploy(std::shared_ptr<Function> f, std::shared_ptr<Instance> thread_owner, std::string sample_request);
  Result<Slot> DeployOnce(const std::shared_ptr<Function>& f);
  // Releases the templates and instance ranges of `slots` (outside mu_).
  void ReleaseSlots(const std::vector<Slot>& slots);
  // A free slot of `f` for instance `inst`, evicting an idle instance when there is none; waits up
  // to start_timeout. The caller holds `lock` on mu_.
  Result<size_t> AcquireSlotLocked(const std::shared_ptr<Function>& f, const Instance& inst,
                                   std::unique_lock<std::mutex>& lock);
  int FreeSlotLocked(const Function& f) const;
  // Makes the process of a new instance of `f` as `mode` says.
  Result<InstanceProcess> MakeProcess(const std::shared_ptr<Function>& f, const Instance& inst, RestoreMode mode,
                                      bool learn, std::string* token, bool* restored);
  std::vector<uint64_t> VersionsLocked(const Function& f) const;
  // The stages of `inv`, brought up as `report` says, answered at `answered`.
  void FillStages(const Invocation& inv, const StartReport& report, Clock::time_point answered,
                  InvokeOutcome* out) const;

  InstanceManagerOptions options_;
  InvocationMetrics metrics_;
  std::string logs_dir_;
  std::string registry_path_;
  int stop_fd_ = -1;  // eventfd, readable once stopping: wakes instances blocked on their channel

  mutable std::mutex mu_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Function>> functions_;
  std::vector<std::shared_ptr<Instance>> live_;      // every thread (instance or deploy) not joined
  std::vector<std::shared_ptr<Instance>> finished_;  // ended, thread to be joined
  uint64_t next_instance_id_ = 0;
  std::condition_variable supervisor_cv_;
  std::thread supervisor_;
};

InvokeOutcome Outcome(InvokeOutcome::Kind kind, std::string message);
// Waits for `fd` readable or the stop eventfd, up to `deadline`. 1 readable, 0 timeout, -1 stop.
int WaitReadable(int fd, int stop_fd, Clock::time_point deadline);

}  // namespace phos::runtime
