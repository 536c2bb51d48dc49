// The CRIU backend: the criu command line (criu 3.17, Debian 12). A capture is a directory of
// images under CriuOptions::images_dir plus `channel-key`, the dumped process's invocation socket
// as criu names it ("socket:[<inode>]"), which restore replaces with a fresh socketpair.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cpu_state_internal.h"
#include "instance_process.h"
#include "phos/base/log.h"
#include "phos/base/subprocess.h"
#include "phos/runtime/cpu_state.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

constexpr const char* kChannelKeyFile = "channel-key";

// Runs criu with `inherit_fd`, when >= 0, as its descriptor 3; its output is standard output and
// standard error interleaved. criu gets no process group of its own: with --shell-job the restored
// process takes criu's session and group (criu(8)).
Result<CommandOutput> RunCriu(const std::vector<std::string>& argv, int inherit_fd,
                              std::chrono::milliseconds timeout) {
  SpawnOptions options;
  options.argv = argv;
  if (inherit_fd >= 0) options.fds = {{inherit_fd, 3}};
  options.stderr_to_stdout = true;
  options.own_process_group = false;
  return RunCommand(std::move(options), timeout);
}

// criu logs its reasons as "Error (file:line): message" lines; the last few say why.
std::string LastLines(const std::string& text, int count) {
  size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "(no output)";
  size_t start = end + 1;
  for (int i = 0; i < count && start > 0; ++i) {
    size_t nl = text.rfind('\n', start - 1);
    start = nl == std::string::npos ? 0 : nl;
    if (nl == std::string::npos) break;
  }
  std::string tail = text.substr(start, end + 1 - start);
  if (!tail.empty() && tail[0] == '\n') tail.erase(0, 1);
  for (char& c : tail) {
    if (c == '\n') c = ';';
  }
  return tail;
}

Result<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<std::unique_ptr<CriuBackend>> CriuBackend::Create(const CriuOptions& options) {
  if (options.images_dir.empty()) return Status::InvalidArgument("criu: CriuOptions::images_dir is required");
  if (options.criu.empty()) return Status::InvalidArgument("criu: CriuOptions::criu is empty");
  std::error_code ec;
  fs::create_directories(options.images_dir, ec);
  if (ec) return Status::IoError("criu: create " + options.images_dir + ": " + ec.message());
  PHOS_RETURN_IF_ERROR(cpu_state_internal::BecomeSubreaper());
  return std::unique_ptr<CriuBackend>(new CriuBackend(options));
}

Status CriuBackend::Available() {
  std::call_once(checked_, [this] {
    Result<CommandOutput> check = RunCriu({options_.criu, "check"}, -1, options_.command_timeout);
    if (!check.ok()) {
      available_ = Status::NotSupported("criu check could not run: " + check.status().message());
    } else if (check->status.exit_code != 0) {
      available_ = Status::NotSupported("criu check failed (exit " + std::to_string(check->status.exit_code) +
                                        "): " + LastLines(check->output, 4));
    }
    if (!available_.ok()) PHOS_LOG(Warn, "cpu-state", "CRIU backend unavailable: {}", available_.message());
  });
  return available_;
}

Result<std::string> CriuBackend::ImagesDir(const CpuStateRef& ref) const {
  if (ref.backend != name()) return Status::InvalidArgument("criu: ref of backend '" + ref.backend + "'");
  if (ref.id.empty() || ref.id.find('/') != std::string::npos || ref.id[0] == '.') {
    return Status::InvalidArgument("criu: malformed capture id '" + ref.id + "'");
  }
  return (fs::path(options_.images_dir) / ref.id).string();
}

Result<CpuStateRef> CriuBackend::CaptureRunning(const RunningProcess& instance) {
  PHOS_RETURN_IF_ERROR(Available());
  return Status::NotSupported("criu: checkpoints of running instances (pid " + std::to_string(instance.pid) +
                              ") are not built yet; use the fork-template CPU state");
}

Result<CpuStateRef> CriuBackend::Capture(ParkedProcess process) {
  auto end_process = [&process] {
    if (process.channel_fd >= 0) close(process.channel_fd);
    process.channel_fd = -1;
    if (process.pid > 0) EndInstanceProcess(process.pid, std::chrono::milliseconds(0));
  };
  if (Status s = Available(); !s.ok()) {
    end_process();
    return s;
  }
  if (process.pid <= 0) {
    end_process();
    return Status::InvalidArgument("criu: no process to capture");
  }
  CpuStateRef ref{std::string(name()), ""};
  {
    std::lock_guard lock(mu_);
    ref.id = "criu-" + std::to_string(getpid()) + "-" + std::to_string(++next_id_);
  }
  fs::path dir = fs::path(options_.images_dir) / ref.id;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) {
    end_process();
    return Status::IoError("criu: create " + dir.string() + ": " + ec.message());
  }
  // The function's end of its channel, as criu names it in the images and in --inherit-fd.
  std::string link =
      "/proc/" + std::to_string(process.pid) + "/fd/" + std::to_string(options_.function_channel_fd);
  std::error_code link_ec;
  std::string key = fs::read_symlink(link, link_ec).string();
  if (link_ec || key.rfind("socket:[", 0) != 0) {
    end_process();
    fs::remove_all(dir, ec);
    return Status::FailedPrecondition("criu: " + link + " is not the function's invocation socket (" +
                                      (link_ec ? link_ec.message() : key) + ")");
  }
  std::ofstream(dir / kChannelKeyFile) << key << "\n";
  // --ext-unix-sk: the channel's peer (phosd) is outside the dumped tree; --shell-job: the
  // function shares phosd's session. The dumped process ends with the dump.
  Result<CommandOutput> dump =
      RunCriu({options_.criu, "dump", "-t", std::to_string(process.pid), "-D", dir.string(), "--shell-job",
               "--ext-unix-sk", "-v2", "-o", "dump.log"},
              -1, options_.command_timeout);
  end_process();
  if (!dump.ok() || dump->status.exit_code != 0) {
    std::string why =
        !dump.ok() ? dump.status().message()
                   : "exit " + std::to_string(dump->status.exit_code) + ": " + LastLines(dump->output, 3);
    fs::remove_all(dir, ec);
    return Status::Unavailable("criu dump of pid " + std::to_string(process.pid) + ": " + why);
  }
  PHOS_LOG(Info, "cpu-state", "{}: pid {} dumped to {}", ref.id, process.pid, dir.string());
  return ref;
}

Result<SpawnedProcess> CriuBackend::Spawn(const CpuStateRef& ref, const ipc::invoke::EnvList& session_env) {
  PHOS_RETURN_IF_ERROR(Available());
  Result<std::string> dir = ImagesDir(ref);
  if (!dir.ok()) return dir.status();
  Result<std::string> env = ipc::invoke::EncodeEnv(session_env);
  if (!env.ok()) return env.status();
  Result<std::string> key = ReadSmallFile(fs::path(*dir) / kChannelKeyFile);
  if (!key.ok()) return Status::NotFound("criu capture '" + ref.id + "': " + key.status().message());
  uint64_t n;
  {
    std::lock_guard lock(mu_);
    n = ++next_id_;
  }
  std::string pidfile = (fs::path(*dir) / ("restore-" + std::to_string(n) + ".pid")).string();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return Status::FromErrno(errno, "socketpair");
  // criu gets the new channel end as its descriptor 3 (RunCriu) and puts it where the dumped
  // socket was.
  Result<CommandOutput> restore =
      RunCriu({options_.criu, "restore", "-D", *dir, "--shell-job", "--ext-unix-sk", "--restore-detached",
               "--inherit-fd", "fd[3]:" + *key, "--pidfile", pidfile, "-v2", "-o",
               "restore-" + std::to_string(n) + ".log"},
              sv[1], options_.command_timeout);
  close(sv[1]);
  if (!restore.ok() || restore->status.exit_code != 0) {
    close(sv[0]);
    std::string why = !restore.ok() ? restore.status().message()
                                    : "exit " + std::to_string(restore->status.exit_code) + ": " +
                                          LastLines(restore->output, 3);
    return Status::Unavailable("criu restore of '" + ref.id + "': " + why);
  }
  Result<std::string> pid_text = ReadSmallFile(pidfile);
  std::error_code ec;
  fs::remove(pidfile, ec);
  pid_t pid = 0;
  if (pid_text.ok()) {
    auto [end, fc] = std::from_chars(pid_text->data(), pid_text->data() + pid_text->size(), pid);
    if (fc != std::errc() || end != pid_text->data() + pid_text->size()) pid = 0;
  }
  if (pid <= 0) {
    close(sv[0]);
    return Status::Corruption("criu restore of '" + ref.id + "' left no valid pid file (" +
                              (pid_text.ok() ? "'" + *pid_text + "'" : pid_text.status().message()) + ")");
  }
  // The restored process was waiting for a frame on its old channel; it now gets its session.
  if (Status sent = ipc::invoke::WriteFrame(sv[0], ipc::invoke::FrameKind::kAdopt, *env); !sent.ok()) {
    close(sv[0]);
    // It need not lead a process group: EndInstanceProcess signals the pid itself too.
    EndInstanceProcess(pid, std::chrono::milliseconds(0));
    return Status::Unavailable("criu restore of '" + ref.id + "': adopt frame: " + sent.message());
  }
  PHOS_LOG(Info, "cpu-state", "{}: restored as pid {}", ref.id, pid);
  return SpawnedProcess{pid, sv[0], ""};
}

Status CriuBackend::Release(const CpuStateRef& ref) {
  Result<std::string> dir = ImagesDir(ref);
  if (!dir.ok()) return dir.status();
  std::error_code ec;
  if (!fs::exists(*dir, ec)) return Status::NotFound("criu capture '" + ref.id + "' does not exist");
  fs::remove_all(*dir, ec);
  if (ec) return Status::IoError("criu: remove " + *dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace phos::runtime
