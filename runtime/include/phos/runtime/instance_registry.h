// The function registry's records: what phosd needs to start instances of a function. Persisted
// in <data-dir>/functions.json so a restarted phosd knows its functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::runtime {

struct FunctionSpec {
  std::string name;        // [A-Za-z0-9_.-], 1..64 characters
  std::string executable;  // absolute path of an executable file
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // added to phosd's own environment
  // Warm instances kept running, 0..64; 0: the function scales to zero (an instance is restored
  // for a request that finds none, and ends after the keep-alive). Default: 1.
  int instances = 1;
  // Devices each instance uses (> 1: a device group with NCCL), 1..72 (ipc::kMaxNcclRanks) and
  // at most the node's device count (checked on registration). Default: 1.
  int gpus = 1;
  // Most instances serving at once (warm ones plus those started for invocations that found none
  // idle), max(1, instances)..64; 0: as many as `instances` (at least 1). A deployed function has
  // one instance range (and snapshot) per instance it may run at once, plus a spare one
  // (InstanceRanges). Default: 0.
  int max_instances = 0;
  // SHA-256 (64 lowercase hex digits) of the token an invocation must bear (Authorization: Bearer);
  // only the digest is kept, so the registry holds no usable secret. Empty: invoke is open to
  // whoever reaches phosd's listener. Default: empty.
  std::string invoke_token_sha256;
  // Requests run, in order, on each instance range's instance right after it is deployed, before
  // its snapshot is taken (post-warm-up snapshots, docs/design.md D10): what the function builds
  // lazily (caches, tuned kernels, captured graphs) is then in every instance it restores. At most
  // kMaxWarmupRequests, kMaxWarmupBytes in all. Default: none.
  std::vector<std::string> warmup;
  // A long-running job (docs/design.md D10), when checkpoint_every > 0: phosd runs its one instance
  // step by step (each request "step" answered {"step": N, "loss": X}), checkpoints it after every
  // checkpoint_every-th step without stopping it (in `mode`), keeps the `keep` newest checkpoints
  // and resumes it from the newest after its process or phosd was killed. It stops after step
  // `steps` (0: runs until removed). Its state must live on the device, allocated before its entry
  // point: after phosd's restart the newest checkpoint's GPU state is restored under a freshly
  // deployed process. checkpoint_every 0..1000000, keep 1..16, steps >= 0. Default: not a job.
  struct Job {
    int checkpoint_every = 0;
    int keep = 2;
    int64_t steps = 0;
    std::string mode = "soft-cow";  // "stop-the-world", "soft-cow" or "soft-recopy"
  } job;
  // Invocations that may wait for an instance at once, 0..100000; one more is refused at once
  // (HTTP 429 with Retry-After), so that a burst beyond what the function can take fails fast
  // rather than timing out in the queue. 0: no bound. Default: 0.
  int max_queue = 0;
  // How long an instance beyond the warm count stays idle before it ends (with instances 0: the
  // function scales to zero), 1..86400000 ms of wall time; 0: phosd's --keep-alive-ms. Default: 0.
  int64_t keep_alive_ms = 0;
  // An invocation's deadline, queueing included, when its caller gives none (X-Phos-Timeout-Ms),
  // 1..3600000 ms of wall time; 0: phosd's --invoke-timeout-ms. Default: 0.
  int64_t timeout_ms = 0;
  // The sandboxed instance may open network connections (the host's network); otherwise it has
  // a network namespace of its own with only a loopback device. Default: false.
  bool network = false;
  // cgroup limits of all the function's processes together (template and instances); 0: none.
  // memory_mib: 1..1048576 (1 TiB); pids: 1..65536; cpu_millis: CPU time per second of wall
  // time, 1..1048576 (1000 = one core). Default: 0 (no limit).
  // And what EACH of its GPU sessions (a deploy's, every instance's) may hold: session_device_mib
  // of device memory (a restored snapshot's buffers count), session_buffers, session_handles
  // (streams, events, cuBLAS handles, communicators) and session_module_mib of module images,
  // each 0..1048576; 0: phosd's own limit, which is also the most any function gets
  // (docs/design.md D15). Default: 0.
  struct Limits {
    int64_t memory_mib = 0;
    int64_t pids = 0;
    int64_t cpu_millis = 0;
    int64_t session_device_mib = 0;
    int64_t session_buffers = 0;
    int64_t session_handles = 0;
    int64_t session_module_mib = 0;
  } limits;
};

inline constexpr size_t kMaxWarmupRequests = 64;
inline constexpr size_t kMaxWarmupBytes = size_t{16} << 20;

// spec.max_instances, or spec.instances when it is 0; at least 1.
inline int MaxInstances(const FunctionSpec& spec) {
  int most = spec.max_instances > spec.instances ? spec.max_instances : spec.instances;
  return most > 0 ? most : 1;
}

// The instance ranges (each with its snapshot) a deployed function gets: one per instance it may
// run at once, and a spare, so that a restore never waits for an ending instance's range to be
// scrubbed (docs/design.md D16).
// A job has one: its instance resumes in the range its checkpoints belong to.
inline int InstanceRanges(const FunctionSpec& spec) {
  return spec.job.checkpoint_every > 0 ? 1 : MaxInstances(spec) + 1;
}
inline constexpr int kMaxJobCheckpointsKept = 16;

// True when `text` is 64 lowercase hex digits: a SHA-256 as sha256sum prints it.
bool IsSha256Hex(std::string_view text);

// Checks name, executable (absolute, exists, executable), environment names, instance and GPU
// counts against phos's limits (not against the node's devices: see InstanceManager::Register).
Status ValidateFunctionSpec(const FunctionSpec& spec);
// The same but for the executable's file (its path must still be absolute): a spec that names a
// file of another node (the cluster's records), checked before this node resolves it.
Status ValidateFunctionSpecFields(const FunctionSpec& spec);

// The request body of POST /v1/functions: {"name", "executable", "args": [...], "env": {...},
// "instances", "gpus", "max_instances", "invoke_token_sha256", "network", "limits": {"memory_mib",
// "pids", "cpu_millis", "session_device_mib", "session_buffers", "session_handles",
// "session_module_mib"}}; every field but "name" and "executable" may be absent (1: registries
// written before it load). Fails with
// InvalidArgument naming the bad field.
Result<FunctionSpec> ParseFunctionSpecJson(std::string_view json);
std::string FunctionSpecToJson(const FunctionSpec& spec);

// One deploy of a function: each deploy of its name is a version, numbered from 1 (docs/design.md
// D18). The spec is the one deployed (its name the function's); executable_sha256 the SHA-256 of
// the executable then (lowercase hex; empty when it could not be read), so that a rollback runs
// the program it names or is refused; deployed_at_ms when (Unix time, ms).
struct FunctionVersion {
  uint64_t number = 1;
  FunctionSpec spec;
  std::string executable_sha256;
  int64_t deployed_at_ms = 0;
};

// What functions.json holds: the version of each function that serves its name, the earlier
// versions kept to roll back to, and when each name was registered on the node
// (InstanceManager's VersionStatus::registered_at_ms; absent from a registry written before it).
struct FunctionRegistry {
  std::vector<FunctionVersion> serving;
  std::vector<FunctionVersion> kept;
  std::map<std::string, int64_t> registered_at_ms;  // by function name
};

// One version as functions.json holds it: the spec's fields with "version", "executable_sha256"
// and "deployed_at_ms"; parsed as a registry entry is (InvalidArgument naming the bad field).
std::string FunctionVersionToJson(const FunctionVersion& version);
Result<FunctionVersion> ParseFunctionVersionJson(std::string_view json);

// functions.json: {"format_version": 1, "functions": [spec + {"version", "executable_sha256",
// "deployed_at_ms", "registered_at_ms"}, ...], "versions": [the same but "registered_at_ms", ...]}
// ("versions": the kept ones; a registry written before versions has none, and each function is
// its version 1). A missing file is an empty registry; a newer format version or a malformed file
// is an error naming the path.
Result<FunctionRegistry> LoadFunctionRegistry(const std::string& path);
// Written to a temporary file, synced and renamed over `path`: a crash leaves the old or the new.
Status SaveFunctionRegistry(const std::string& path, const FunctionRegistry& registry);

}  // namespace phos::runtime
