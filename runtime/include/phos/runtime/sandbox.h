// Sandboxed function processes (docs/design.md, "Sandbox"): each function runs as its own
// unprivileged uid, in its own mount, PID, IPC, UTS and network namespaces (bubblewrap), with a
// read-only view of the host, phosd's data directory hidden except gpu.sock, a private /run
// scratch tmpfs, a minimal /dev, and the cgroup limits of its spec.
//
//   PHOS_ASSIGN_OR_RETURN(auto sandbox, Sandbox::Open({.mode = SandboxMode::kAuto, .data_dir = dir}));
//   PHOS_RETURN_IF_ERROR(sandbox->PrepareFunction(spec));   // its cgroup, at registration
//   SpawnOptions o = ...;                                  // the function's command line
//   PHOS_RETURN_IF_ERROR(sandbox->Confine(spec, &o));      // the same, sandboxed
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/base/subprocess.h"
#include "phos/runtime/instance_registry.h"

namespace phos::runtime {

// The host uids (and gids of the same numbers) sandboxed functions run as: the range's first id
// is the group of gpu.sock, which every function has as a supplementary group; each function
// runs as one of the others, picked from its name (ForFunction). The one place that says which
// uids are phos's sandboxes: a peer-credential check on gpu.sock asks Contains.
struct SandboxIds {
  uid_t first = 200000;
  uid_t last = 299999;

  // "FIRST-LAST", at least two ids, both above 0 and at most 2^31 - 2.
  static Result<SandboxIds> Parse(std::string_view text);
  gid_t socket_group() const { return static_cast<gid_t>(first); }
  // The uid (and gid) of function `name`: stable across restarts (no record to keep), one of
  // first+1..last. Two functions may share one when names collide in the hash; their processes
  // still see neither each other's pids nor files (namespaces), only the uid is shared.
  uid_t ForFunction(std::string_view name) const;
  // Whether `uid` is one of the sandbox ids (the socket group's id included).
  bool Contains(uid_t uid) const { return uid >= first && uid <= last; }
};

enum class SandboxMode {
  kAuto,  // sandboxed when the machine allows it; why not is logged
  kOn,    // phosd does not start when it cannot sandbox
  kOff,   // functions run as phosd's user, unconfined
};
Result<SandboxMode> ParseSandboxMode(std::string_view text);

struct SandboxOptions {
  // Default: kAuto.
  SandboxMode mode = SandboxMode::kAuto;
  // Default: 200000-299999.
  SandboxIds ids;
  // phosd's data directory: hidden from functions, but for its gpu.sock. Required unless kOff.
  std::string data_dir;
  // The bubblewrap and setpriv programs (searched in PATH when without a slash).
  // Default: "bwrap", "setpriv".
  std::string bwrap = "bwrap";
  std::string setpriv = "setpriv";
  // Where the cgroup hierarchies are found. Default: "/proc/self/mountinfo".
  std::string mountinfo = "/proc/self/mountinfo";
};

class FunctionCgroups;

class Sandbox {
 public:
  // Opened once phosd's gpu.sock exists (it gets the socket group, mode 0660, and the trial
  // sandbox binds it). kOff: a sandbox that confines nothing. kAuto: the same when this machine cannot
  // sandbox (not root, no bwrap or setpriv, a trial sandbox fails, cgroup controllers missing), with the
  // reason logged. kOn: that reason as an error.
  static Result<std::unique_ptr<Sandbox>> Open(const SandboxOptions& options);
  ~Sandbox();

  bool enabled() const { return enabled_; }
  // Why the sandbox is off ("" when on).
  const std::string& why_off() const { return why_off_; }
  const SandboxIds& ids() const { return options_.ids; }

  // Where functions find gpu.sock (PHOS_GPU_SOCKET): inside the sandbox at kSocketInside, whatever
  // the data directory's ancestors let the function's uid traverse; `host_path` when off.
  static constexpr const char* kSocketInside = "/run/phos/gpu.sock";
  std::string SocketPathForFunctions(const std::string& host_path) const {
    return enabled_ ? kSocketInside : host_path;
  }
  // Where a function's executable kept in the data directory (an uploaded artifact) is bound
  // inside its sandbox, and started from; one anywhere else keeps its host path.
  static constexpr const char* kExecutableInside = "/run/phos/executable";
  static std::string ExecutableInside(const SandboxOptions& options, const FunctionSpec& spec);
  // Creates (again) the function's cgroup with its spec's limits; no-op when off.
  Status PrepareFunction(const FunctionSpec& spec);
  // Kills what runs in the function's cgroup and removes it; no-op when off.
  void RemoveFunction(const std::string& name);
  // Rewrites `options` (the function's own command line, environment and descriptors) to start
  // it in the function's sandbox; no change when off. PrepareFunction must have succeeded.
  Status Confine(const FunctionSpec& spec, SpawnOptions* options) const;

  // The parent cgroup of every function of the phosd on `data_dir` (canonical path): one per data
  // directory, so a restarted phosd finds its predecessor's groups.
  static std::string CgroupParent(std::string_view canonical_data_dir);

  // The bubblewrap and setpriv arguments that run `spec` as `uid` with the socket group `group`
  // (everything before the function's own argv); public for its tests.
  static std::vector<std::string> SandboxArgv(const SandboxOptions& options, const FunctionSpec& spec,
                                              uid_t uid, gid_t group);

 private:
  explicit Sandbox(SandboxOptions options);
  // Why this machine cannot sandbox, or Ok.
  Status Probe();

  SandboxOptions options_;
  bool enabled_ = false;
  std::string why_off_;
  std::unique_ptr<FunctionCgroups> cgroups_;
};

}  // namespace phos::runtime
