// Per-function cgroups (private to the runtime): where the memory, pids and cpu controllers are
// mounted (cgroup v2 where its tree offers them, else the v1 hierarchies: detected from
// /proc/self/mountinfo, never assumed), one group per function with the limits of its spec,
// and the files a process writes "0" into to join it (Subprocess's join_cgroups).
//
//   PHOS_ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroupLayout("/proc/self/mountinfo"));
//   PHOS_ASSIGN_OR_RETURN(auto tree, FunctionCgroups::Open(layout, "phos-3f2a"));
//   PHOS_ASSIGN_OR_RETURN(std::vector<std::string> join, tree->Create("mlp", limits));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "phos/base/status.h"

namespace phos::runtime {

// The controllers phos limits, and the directory of the hierarchy each is found in ("" when not
// available). In v2 all three name the unified mount.
struct CgroupLayout {
  struct Controller {
    std::string mount;  // the hierarchy's mount point; "" when the controller is not available
    bool v2 = false;    // the unified (cgroup2) hierarchy, else a v1 hierarchy
  };
  Controller memory;
  Controller pids;
  Controller cpu;

  bool complete() const { return !memory.mount.empty() && !pids.mount.empty() && !cpu.mount.empty(); }
  // "memory: v1 /sys/fs/cgroup/memory, pids: v1 ..., cpu: none": for the log.
  std::string Describe() const;
};

// Reads a mountinfo file (proc(5)): a controller is taken from the cgroup2 mount when that
// mount's cgroup.controllers lists it, else from a v1 mount of it (its super options name it).
// Only mounts of a hierarchy's root are used (a nested view cannot be written as the root).
Result<CgroupLayout> DetectCgroupLayout(const std::string& mountinfo_path);

struct CgroupLimits {
  int64_t memory_bytes = 0;  // 0: no limit
  int64_t pids = 0;          // 0: no limit
  int64_t cpu_millis = 0;    // CPU milliseconds per second of wall time; 0: no limit
};

// The groups <hierarchy>/<parent>/<function> of one phosd. The parent is phosd's own (its name
// derived from its data directory), so that groups a previous phosd with the same data directory
// left are recognised as stale and removed at Open, while another phosd's are left alone.
class FunctionCgroups {
 public:
  // Creates <hierarchy>/<parent> in each controller's hierarchy (in v2 enabling the three
  // controllers for its children) after removing what a previous run left in it.
  static Result<std::unique_ptr<FunctionCgroups>> Open(const CgroupLayout& layout, const std::string& parent);

  // (Re)creates the function's group with `limits` and returns the cgroup.procs files a process
  // joins it through. `function` is a validated function name (no '/').
  Result<std::vector<std::string>> Create(const std::string& function, const CgroupLimits& limits);
  // Kills what still runs in the function's group and removes it; a group that is not there is
  // no error.
  Status Remove(const std::string& function);
  // Removes every function's group (phosd stopping).
  void RemoveAll();

  // The distinct directories of a function's group (one per hierarchy).
  std::vector<std::string> Directories(const std::string& function) const;

 private:
  FunctionCgroups(CgroupLayout layout, std::string parent)
      : layout_(std::move(layout)), parent_(std::move(parent)) {}

  CgroupLayout layout_;
  std::string parent_;
};

}  // namespace phos::runtime
