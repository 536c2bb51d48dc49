#include "instance_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "phos/base/subprocess.h"
#include "phos/ipc/instance_channel.h"

namespace phos::runtime {
namespace {

// An instance forked by a sandboxed template: a child of its sandbox's PID-namespace init, which
// reaps it, not of phosd. It is signalled (its group too) and waited for through a pidfd; how it
// ended is not phosd's to know.
std::string EndSandboxedInstance(pid_t pid, std::chrono::milliseconds grace) {
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) return errno == ESRCH ? "ended in its sandbox" : "not reachable: " + std::string(strerror(errno));
  auto ended_within = [pidfd](int ms) {
    pollfd p{pidfd, POLLIN, 0};
    int ready;
    do {
      ready = poll(&p, 1, ms);
    } while (ready < 0 && errno == EINTR);
    return ready > 0;
  };
  // Only a process of another PID namespace: a pid of phosd's own that is not its child is no
  // instance (one that ended and whose pid was taken again), and is left alone. The process may
  // end (and its /proc entry go) while this is checked: the pidfd still tells.
  std::error_code theirs_ec, ours_ec;
  const std::filesystem::path theirs = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/pid", theirs_ec);
  const std::filesystem::path ours = std::filesystem::read_symlink("/proc/self/ns/pid", ours_ec);
  if (theirs_ec || ours_ec || theirs == ours) {
    const bool ended = ended_within(0);
    ClosePidfd(pidfd);
    if (ended) return "ended in its sandbox";
    return "not reapable: pid " + std::to_string(pid) + " is no child of phosd";
  }
  std::string how = "ended in its sandbox";
  if (!ended_within(static_cast<int>(grace.count()))) {
    kill(-pid, SIGKILL);
    PidfdSendSignal(pidfd, SIGKILL);
    how = ended_within(-1) ? "killed in its sandbox" : "not waited for: " + std::string(strerror(errno));
  }
  ClosePidfd(pidfd);
  return how;
}

}  // namespace

Result<InstanceProcess> SpawnInstanceProcess(
    const FunctionSpec& spec, const std::string& logs_dir,
    const std::vector<std::pair<std::string, std::string>>& extra_env, const Sandbox* sandbox) {
  static std::atomic<uint64_t> spawn_counter{0};
  // The pid is known only after the spawn: the log is written under a temporary name, renamed after.
  std::string tmp_log = logs_dir + "/" + spec.name + "-spawning-" + std::to_string(getpid()) + "-" +
                        std::to_string(spawn_counter.fetch_add(1)) + ".log";
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return Status::FromErrno(errno, "socketpair");
  constexpr int kChildInvokeFd = 3;

  SpawnOptions options;
  options.argv = {spec.executable};
  options.argv.insert(options.argv.end(), spec.args.begin(), spec.args.end());
  // The variables phosd sets itself; inherited values would point at another phosd's instance.
  options.unset_env = {"PHOS_INVOKE_FD", "PHOS_GPU_SOCKET", "PHOS_INSTANCE_TOKEN"};
  options.env.assign(spec.env.begin(), spec.env.end());
  options.env.insert(options.env.end(), extra_env.begin(), extra_env.end());
  options.env.emplace_back(ipc::invoke::kInvokeFdEnv, std::to_string(kChildInvokeFd));
  options.fds = {{sv[1], kChildInvokeFd}};
  options.stdout_file = tmp_log;
  options.stderr_to_stdout = true;
  // Its own group: the whole group is killed when the instance is discarded.
  options.own_process_group = true;
  if (sandbox != nullptr) {
    Status confined = sandbox->Confine(spec, &options);
    if (!confined.ok()) {
      close(sv[0]);
      close(sv[1]);
      return confined;
    }
  }
  Result<Subprocess> child = Subprocess::Spawn(options);
  close(sv[1]);
  if (!child.ok()) {
    close(sv[0]);
    unlink(tmp_log.c_str());
    return child.status();
  }
  InstanceProcess process;
  // The instance manager ends it by pid (EndInstanceProcess).
  process.pid = child->Release();
  process.channel_fd = sv[0];
  process.log_path = logs_dir + "/" + spec.name + "-" + std::to_string(process.pid) + ".log";
  if (std::rename(tmp_log.c_str(), process.log_path.c_str()) != 0) process.log_path = tmp_log;
  return process;
}

std::string LastLogLine(const std::string& log_path) {
  constexpr off_t kTailBytes = 4096;
  int fd = open(log_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0) {  // empty, or not a file lseek can measure
    close(fd);
    return "";
  }
  const off_t from = size > kTailBytes ? size - kTailBytes : 0;
  std::string tail(static_cast<size_t>(size - from), '\0');
  const ssize_t n = pread(fd, tail.data(), tail.size(), from);
  close(fd);
  tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r' || tail.back() == ' ')) tail.pop_back();
  std::string line = tail.substr(tail.rfind('\n') == std::string::npos ? 0 : tail.rfind('\n') + 1);
  // A function writes what it likes: only printable ASCII goes on into a JSON answer.
  for (char& c : line) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return line;
}

namespace {

// The last `keep` bytes of `from` (fewer when it is shorter) into `to`, replaced. A function may
// make its log sparse and huge (it shares the open file and may seek): only a bounded tail is
// ever copied.
Status CopyTail(const std::string& from, const std::string& to, uint64_t keep) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return Status::IoError("open " + from);
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(static_cast<std::streamoff>(size > keep ? size - keep : 0));
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IoError("open " + to);
  std::vector<char> buffer(1 << 20);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    out.write(buffer.data(), in.gcount());
  }
  return out ? Status::Ok() : Status::IoError("write " + to);
}

}  // namespace

int BoundFunctionLogs(const std::string& logs_dir, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  int cut = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(logs_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& log = it->path();
    std::error_code size_ec;
    if (log.extension() != ".log" || !it->is_regular_file(size_ec) || it->file_size(size_ec) <= max_bytes ||
        size_ec) {
      continue;
    }
    const fs::path previous = log.string() + ".1";
    const Status copied = CopyTail(log.string(), previous.string(), max_bytes);
    if (truncate(log.c_str(), 0) != 0) continue;  // gone meanwhile: nothing to bound
    if (int fd = open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC); fd >= 0) {
      const std::string line = "[phosd] this log passed its limit of " + std::to_string(max_bytes >> 20) +
                               " MiB and was cut here; " +
                               (copied.ok() ? "its last " + std::to_string(max_bytes >> 20) + " MiB before the cut are in " +
                                                  previous.filename().string()
                                            : "what came before is lost (" + copied.message() + ")") +
                               "\n";
      ssize_t ignored = write(fd, line.data(), line.size());
      (void)ignored;
      close(fd);
    }
    ++cut;
  }
  return cut;
}

std::string EndInstanceProcess(pid_t pid, std::chrono::milliseconds grace) {
  // A forked instance makes itself its group's leader right after its fork; killed before that, it
  // has no group yet, and Subprocess signals the process itself as well.
  Result<Subprocess> process = Subprocess::Adopt(pid, /*leads_group=*/true);
  if (!process.ok()) return EndSandboxedInstance(pid, grace);
  Result<ExitStatus> how = process->Stop(grace, /*first_signal=*/0);
  if (!how.ok()) return "not reapable: " + how.status().message();
  return how->ToString();
}

}  // namespace phos::runtime
