#include "cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "phos/base/log.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

// cpu.max / cfs: quota per period; 100 ms is the kernel's default period.
constexpr int64_t kCpuPeriodMicros = 100000;

bool HasWord(const std::string& list, const std::string& word, char separator) {
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, separator)) {
    if (item == word) return true;
  }
  return false;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status WriteFile(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  ssize_t n = write(fd, value.data(), value.size());
  int write_errno = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size()))
    return Status::FromErrno(write_errno, "write '" + value + "' to " + path);
  return Status::Ok();
}

// Kills every process of the group directory and removes it. The processes leave the group as
// they exit, not at once: the removal is retried for a bounded time.
Status KillAndRemove(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  // Child groups first (a previous phosd's functions under its parent).
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) KillAndRemove(entry.path().string()).IgnoreError();
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::istringstream procs(ReadSmallFile(dir + "/cgroup.procs"));
    for (pid_t pid; procs >> pid;) {
      if (pid > 0) kill(pid, SIGKILL);
    }
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EBUSY) return Status::FromErrno(errno, "remove cgroup " + dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::Unavailable("remove cgroup " + dir + ": processes still in it after 1 s");
}

std::string Describe(const char* name, const CgroupLayout::Controller& c) {
  return std::string(name) + ": " + (c.mount.empty() ? "none" : (c.v2 ? "v2 " : "v1 ") + c.mount);
}

}  // namespace

std::string CgroupLayout::Describe() const {
  return runtime::Describe("memory", memory) + ", " + runtime::Describe("pids", pids) + ", " +
         runtime::Describe("cpu", cpu);
}

Result<CgroupLayout> DetectCgroupLayout(const std::string& mountinfo_path) {
  std::ifstream in(mountinfo_path);
  if (!in) return Status::NotFound("cgroups: cannot read " + mountinfo_path);
  CgroupLayout v1;
  CgroupLayout v2;
  for (std::string line; std::getline(in, line);) {
    // id parent major:minor root mount-point options [optional fields] - fstype source super-options
    std::istringstream fields(line);
    std::string id, parent, device, root, mount_point, options;
    if (!(fields >> id >> parent >> device >> root >> mount_point >> options)) continue;
    std::string word;
    while (fields >> word && word != "-") {
    }
    std::string fstype, source, super_options;
    if (!(fields >> fstype >> source >> super_options)) continue;
    if (root != "/") continue;
    if (fstype == "cgroup2") {
      std::string controllers = ReadSmallFile(mount_point + "/cgroup.controllers");
      while (!controllers.empty() && controllers.back() == '\n') controllers.pop_back();
      for (auto [name, c] : {std::pair{"memory", &v2.memory}, {"pids", &v2.pids}, {"cpu", &v2.cpu}}) {
        if (HasWord(controllers, name, ' ') && c->mount.empty()) *c = {mount_point, true};
      }
    } else if (fstype == "cgroup") {
      for (auto [name, c] : {std::pair{"memory", &v1.memory}, {"pids", &v1.pids}, {"cpu", &v1.cpu}}) {
        if (HasWord(super_options, name, ',') && c->mount.empty()) *c = {mount_point, false};
      }
    }
  }
  // A controller is bound to one hierarchy at a time: v2 lists it only when no v1 mount has it.
  CgroupLayout layout;
  layout.memory = v2.memory.mount.empty() ? v1.memory : v2.memory;
  layout.pids = v2.pids.mount.empty() ? v1.pids : v2.pids;
  layout.cpu = v2.cpu.mount.empty() ? v1.cpu : v2.cpu;
  return layout;
}

Result<std::unique_ptr<FunctionCgroups>> FunctionCgroups::Open(const CgroupLayout& layout,
                                                               const std::string& parent) {
  if (!layout.complete())
    return Status::NotSupported("cgroups: controllers missing (" + layout.Describe() + ")");
  if (parent.empty() || parent.find('/') != std::string::npos)
    return Status::InvalidArgument("cgroups: bad parent group name '" + parent + "'");
  std::unique_ptr<FunctionCgroups> groups(new FunctionCgroups(layout, parent));
  for (const std::string& mount : groups->Directories("")) {
    std::string dir = mount;
    PHOS_RETURN_IF_ERROR(KillAndRemove(dir).WithContext("cgroups: stale groups of a previous run"));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Status::IoError("cgroups: create " + dir + ": " + ec.message());
  }
  // v2: a group's controllers are those its parent enables for its children.
  for (const CgroupLayout::Controller* c : {&layout.memory, &layout.pids, &layout.cpu}) {
    if (!c->v2) continue;
    for (const std::string& dir : {c->mount, c->mount + "/" + parent}) {
      PHOS_RETURN_IF_ERROR(
          WriteFile(dir + "/cgroup.subtree_control", "+memory +pids +cpu").WithContext("cgroups"));
    }
    break;
  }
  PHOS_LOG(Info, "sandbox", "cgroups: {} under '{}'", layout.Describe(), parent);
  return groups;
}

std::vector<std::string> FunctionCgroups::Directories(const std::string& function) const {
  std::vector<std::string> dirs;
  for (const CgroupLayout::Controller* c : {&layout_.memory, &layout_.pids, &layout_.cpu}) {
    std::string dir = c->mount + "/" + parent_ + (function.empty() ? "" : "/" + function);
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  }
  return dirs;
}

Result<std::vector<std::string>> FunctionCgroups::Create(const std::string& function,
                                                         const CgroupLimits& limits) {
  if (function.empty() || function.find('/') != std::string::npos || function == "." || function == "..")
    return Status::InvalidArgument("cgroups: bad function name '" + function + "'");
  PHOS_RETURN_IF_ERROR(Remove(function));
  std::vector<std::string> join;
  for (const std::string& dir : Directories(function)) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::FromErrno(errno, "cgroups: create " + dir);
    join.push_back(dir + "/cgroup.procs");
  }
  auto group_of = [&](const CgroupLayout::Controller& c) {
    return c.mount + "/" + parent_ + "/" + function + "/";
  };
  const std::string memory = group_of(layout_.memory);
  if (limits.memory_bytes > 0) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    if (layout_.memory.v2) {
      PHOS_RETURN_IF_ERROR(WriteFile(memory + "memory.max", bytes));
      // Swap would let a function past its limit instead of being killed at it.
      if (fs::exists(memory + "memory.swap.max"))
        PHOS_RETURN_IF_ERROR(WriteFile(memory + "memory.swap.max", "0"));
    } else {
      PHOS_RETURN_IF_ERROR(WriteFile(memory + "memory.limit_in_bytes", bytes));
      if (fs::exists(memory + "memory.memsw.limit_in_bytes"))
        PHOS_RETURN_IF_ERROR(WriteFile(memory + "memory.memsw.limit_in_bytes", bytes));
    }
  }
  if (limits.pids > 0)
    PHOS_RETURN_IF_ERROR(WriteFile(group_of(layout_.pids) + "pids.max", std::to_string(limits.pids)));
  if (limits.cpu_millis > 0) {
    // Milliseconds per second = microseconds per period / (period / 1000 us).
    const int64_t quota = limits.cpu_millis * (kCpuPeriodMicros / 1000);
    const std::string cpu = group_of(layout_.cpu);
    if (layout_.cpu.v2) {
      PHOS_RETURN_IF_ERROR(
          WriteFile(cpu + "cpu.max", std::to_string(quota) + " " + std::to_string(kCpuPeriodMicros)));
    } else {
      PHOS_RETURN_IF_ERROR(WriteFile(cpu + "cpu.cfs_period_us", std::to_string(kCpuPeriodMicros)));
      PHOS_RETURN_IF_ERROR(WriteFile(cpu + "cpu.cfs_quota_us", std::to_string(quota)));
    }
  }
  return join;
}

Status FunctionCgroups::Remove(const std::string& function) {
  if (function.empty() || function.find('/') != std::string::npos)
    return Status::InvalidArgument("cgroups: bad function name '" + function + "'");
  Status first;
  for (const std::string& dir : Directories(function)) {
    Status removed = KillAndRemove(dir);
    if (first.ok()) first = removed;
  }
  return first;
}

void FunctionCgroups::RemoveAll() {
  for (const std::string& dir : Directories("")) {
    Status s = KillAndRemove(dir);
    if (!s.ok()) PHOS_LOG(Warn, "sandbox", "{}", s.message());
  }
}

}  // namespace phos::runtime
