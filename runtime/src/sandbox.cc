#include "phos/runtime/sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "cgroups.h"
#include "phos/base/log.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

// Joins the cgroups named before "--" (writing 0 to a cgroup.procs file moves the writer), then
// executes what follows: bubblewrap and everything it starts are then in the function's groups
// from their first instruction. posix_spawn (Subprocess) runs no code of ours between fork and
// exec, hence this step; the paths are arguments, never part of the script.
constexpr const char* kJoinCgroupsScript =
    "for f; do [ \"$f\" = -- ] && break; echo 0 > \"$f\" || exit 126; shift; done; shift; exec \"$@\"";

// The uid of a function: FNV-1a of its name over the range (without the socket group's id).
uint64_t Fnv1a(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

Result<uid_t> ParseId(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // 2^31 - 1 is left out: some tools take (uid_t)-1 style values as "unset" in 31-bit arithmetic.
  if (ec != std::errc() || end != text.data() + text.size() || value == 0 || value > 0x7ffffffeull)
    return Status::InvalidArgument("sandbox ids: '" + std::string(text) + "' is not an id in 1..2147483646");
  return static_cast<uid_t>(value);
}

}  // namespace

Result<SandboxIds> SandboxIds::Parse(std::string_view text) {
  size_t dash = text.find('-');
  if (dash == std::string_view::npos)
    return Status::InvalidArgument("sandbox ids: '" + std::string(text) + "' is not FIRST-LAST");
  PHOS_ASSIGN_OR_RETURN(uid_t first, ParseId(text.substr(0, dash)));
  PHOS_ASSIGN_OR_RETURN(uid_t last, ParseId(text.substr(dash + 1)));
  if (last <= first)
    return Status::InvalidArgument("sandbox ids: '" + std::string(text) +
                                   "' needs at least two ids, first < last");
  return SandboxIds{first, last};
}

uid_t SandboxIds::ForFunction(std::string_view name) const {
  const uint64_t count = static_cast<uint64_t>(last) - first;  // ids first+1..last
  return static_cast<uid_t>(first + 1 + Fnv1a(name) % count);
}

Result<SandboxMode> ParseSandboxMode(std::string_view text) {
  if (text == "auto") return SandboxMode::kAuto;
  if (text == "on") return SandboxMode::kOn;
  if (text == "off") return SandboxMode::kOff;
  return Status::InvalidArgument("--sandbox must be auto, on or off, not '" + std::string(text) + "'");
}

std::vector<std::string> Sandbox::SandboxArgv(const SandboxOptions& options, const FunctionSpec& spec,
                                              uid_t uid, gid_t group) {
  // Neither --die-with-parent (its parent-death signal follows the phosd thread that spawned the
  // sandbox, which ends long before the function) nor --new-session (the whole sandbox stays in the
  // process group phosd ends it by; the function gets no terminal: stdin is /dev/null, output a file).
  std::vector<std::string> argv = {options.bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                                   "--unshare-cgroup-try"};
  if (!spec.network) argv.push_back("--unshare-net");
  // What setpriv needs to become the function's user, and nothing else (bubblewrap applies the
  // options in order); setpriv then drops these too.
  argv.insert(argv.end(), {"--cap-drop", "ALL"});
  for (const char* cap : {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"}) {
    argv.insert(argv.end(), {"--cap-add", cap});
  }
  const std::string socket = options.data_dir + "/gpu.sock";
  // The host's files, read-only; then what is hidden or private on top.
  argv.insert(argv.end(), {"--ro-bind", "/", "/", "--tmpfs", options.data_dir});
  // Its executable: where it lies on the host, or, when phosd keeps it in the data directory (an
  // uploaded artifact), at kExecutableInside: the data directory and the directories above it
  // need not let the function's uid through (a data directory under root's home, say).
  const bool artifact = ExecutableInside(options, spec) != spec.executable;
  if (!artifact) argv.insert(argv.end(), {"--ro-bind", spec.executable, spec.executable});
  argv.insert(argv.end(),
              {"--dev", "/dev", "--proc", "/proc",
               // The private scratch directory (TMPDIR), gone with the sandbox.
               "--perms", "1777", "--tmpfs", "/run", "--setenv", "TMPDIR", "/run", "--chdir", "/run",
               // The socket where the function's uid reaches it (a mount point: not
               // to be removed or replaced from inside).
               // bubblewrap makes missing parents 0700: the directory is made first.
               "--perms", "0755", "--dir", "/run/phos", "--bind", socket, kSocketInside});
  if (artifact) argv.insert(argv.end(), {"--ro-bind", spec.executable, kExecutableInside});
  argv.insert(argv.end(),
              {"--", options.setpriv, "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
               "--groups=" + std::to_string(group), "--no-new-privs", "--inh-caps=-all",
               "--bounding-set=-all", "--"});
  return argv;
}

Result<std::unique_ptr<Sandbox>> Sandbox::Open(const SandboxOptions& options) {
  std::unique_ptr<Sandbox> sandbox(new Sandbox(options));
  if (options.mode == SandboxMode::kOff) {
    sandbox->why_off_ = "--sandbox off";
    PHOS_LOG(Warn, "sandbox", "off (--sandbox off): functions run as phosd's user and see its files");
    return sandbox;
  }
  Status probed = sandbox->Probe();
  if (!probed.ok()) {
    if (options.mode == SandboxMode::kOn) return probed.WithContext("--sandbox on");
    sandbox->why_off_ = probed.message();
    PHOS_LOG(Warn, "sandbox", "off: {}; functions run as phosd's user and see its files", probed.message());
    return sandbox;
  }
  sandbox->enabled_ = true;
  PHOS_LOG(Info, "sandbox", "on: functions run as uids {}-{} (bubblewrap), gpu.sock group {}",
           options.ids.first + 1, options.ids.last, options.ids.first);
  return sandbox;
}

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)) {}

Sandbox::~Sandbox() {
  if (cgroups_ != nullptr) cgroups_->RemoveAll();
}

std::string Sandbox::ExecutableInside(const SandboxOptions& options, const FunctionSpec& spec) {
  return spec.executable.starts_with(options.data_dir + "/") ? kExecutableInside : spec.executable;
}

std::string Sandbox::CgroupParent(std::string_view canonical_data_dir) {
  char parent[32];
  std::snprintf(parent, sizeof(parent), "phos-%016llx",
                static_cast<unsigned long long>(Fnv1a(canonical_data_dir)));
  return parent;
}

Status Sandbox::Probe() {
  if (geteuid() != 0) return Status::FailedPrecondition("phosd is not root (it sets each function's uid)");
  if (options_.data_dir.empty()) return Status::InvalidArgument("sandbox: no data directory");
  std::error_code ec;
  options_.data_dir = fs::canonical(options_.data_dir, ec).string();
  if (ec) return Status::IoError("sandbox: data directory: " + ec.message());
  PHOS_ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroupLayout(options_.mountinfo));
  if (!layout.complete()) return Status::NotSupported("cgroup controllers missing: " + layout.Describe());
  PHOS_ASSIGN_OR_RETURN(cgroups_, FunctionCgroups::Open(layout, CgroupParent(options_.data_dir)));
  // Sandboxed functions reach gpu.sock through its group (SandboxIds), not through its mode.
  const std::string socket = options_.data_dir + "/gpu.sock";
  if (chown(socket.c_str(), static_cast<uid_t>(-1), options_.ids.socket_group()) != 0 ||
      chmod(socket.c_str(), 0660) != 0) {
    return Status::FromErrno(
        errno, "sandbox: give " + socket + " to group " + std::to_string(options_.ids.socket_group()));
  }
  // A trial sandbox with everything a function gets.
  FunctionSpec trial{.name = "sandbox-probe", .executable = "/bin/true"};
  SpawnOptions run;
  run.argv = SandboxArgv(options_, trial, options_.ids.ForFunction(trial.name), options_.ids.socket_group());
  run.argv.push_back(trial.executable);
  run.stderr_to_stdout = true;
  Result<CommandOutput> ran = RunCommand(run, std::chrono::seconds(10));
  if (!ran.ok()) return ran.status().WithContext("trial sandbox (" + options_.bwrap + ")");
  if (!ran->status.success()) {
    std::string said = ran->output.substr(0, 300);
    while (!said.empty() && said.back() == '\n') said.pop_back();
    return Status::Unavailable("trial sandbox (" + options_.bwrap + ") " + ran->status.ToString() + ": " +
                               said);
  }
  return Status::Ok();
}

Status Sandbox::PrepareFunction(const FunctionSpec& spec) {
  if (!enabled_) return Status::Ok();
  CgroupLimits limits{.memory_bytes = spec.limits.memory_mib << 20,
                      .pids = spec.limits.pids,
                      .cpu_millis = spec.limits.cpu_millis};
  return cgroups_->Create(spec.name, limits).status().WithContext("sandbox of '" + spec.name + "'");
}

void Sandbox::RemoveFunction(const std::string& name) {
  if (!enabled_) return;
  Status removed = cgroups_->Remove(name);
  if (!removed.ok()) PHOS_LOG(Warn, "sandbox", "function '{}': {}", name, removed.message());
}

Status Sandbox::Confine(const FunctionSpec& spec, SpawnOptions* options) const {
  if (!enabled_) return Status::Ok();
  std::vector<std::string> argv = {"/bin/sh", "-c", kJoinCgroupsScript, "phos-join-cgroups"};
  for (const std::string& dir : cgroups_->Directories(spec.name)) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return Status::FailedPrecondition("sandbox of '" + spec.name + "': its cgroup " + dir + " is missing");
    argv.push_back(dir + "/cgroup.procs");
  }
  argv.push_back("--");
  std::vector<std::string> sandbox =
      SandboxArgv(options_, spec, options_.ids.ForFunction(spec.name), options_.ids.socket_group());
  argv.insert(argv.end(), sandbox.begin(), sandbox.end());
  argv.insert(argv.end(), options->argv.begin(), options->argv.end());
  // The program is started at the path its sandbox shows it.
  const size_t program = argv.size() - options->argv.size();
  if (!options->argv.empty() && argv[program] == spec.executable) argv[program] = ExecutableInside(options_, spec);
  options->argv = std::move(argv);
  return Status::Ok();
}

}  // namespace phos::runtime
