#include "instance_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "phos/ipc/instance_channel.h"

extern char** environ;

namespace phos::runtime {
namespace {

// The variables phosd sets itself; inherited values would point at another phosd's instance.
bool IsInstanceVariable(std::string_view entry) {
  for (std::string_view name : {"PHOS_INVOKE_FD=", "PHOS_GPU_SOCKET=", "PHOS_INSTANCE_TOKEN="}) {
    if (entry.substr(0, name.size()) == name) return true;
  }
  return false;
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

Result<InstanceProcess> SpawnInstanceProcess(const FunctionSpec& spec, const std::string& logs_dir,
                                             const std::vector<std::pair<std::string, std::string>>& extra_env) {
  static std::atomic<uint64_t> spawn_counter{0};
  // The pid is known only after the spawn: open under a temporary name, rename after.
  std::string tmp_log = logs_dir + "/" + spec.name + "-spawning-" + std::to_string(getpid()) + "-" +
                        std::to_string(spawn_counter.fetch_add(1)) + ".log";
  int log_fd = open(tmp_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::FromErrno(errno, "open instance log " + tmp_log);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    Status s = Status::FromErrno(errno, "socketpair");
    close(log_fd);
    unlink(tmp_log.c_str());
    return s;
  }
  constexpr int kChildInvokeFd = 3;

  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!IsInstanceVariable(*e)) env_storage.emplace_back(*e);
  }
  auto set_env = [&env_storage](const std::string& key, const std::string& value) {
    std::string prefix = key + "=";
    for (std::string& entry : env_storage) {
      if (entry.compare(0, prefix.size(), prefix) == 0) {
        entry = prefix + value;
        return;
      }
    }
    env_storage.push_back(prefix + value);
  };
  for (const auto& [k, v] : spec.env) set_env(k, v);
  for (const auto& [k, v] : extra_env) set_env(k, v);
  set_env(ipc::invoke::kInvokeFdEnv, std::to_string(kChildInvokeFd));
  std::vector<char*> envp;
  for (std::string& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  std::vector<std::string> arg_storage = {spec.executable};
  arg_storage.insert(arg_storage.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (std::string& a : arg_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  // dup2 onto a different number clears close-on-exec; glibc (>= 2.29) also clears it when the
  // numbers are equal.
  posix_spawn_file_actions_adddup2(&actions, sv[1], kChildInvokeFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group (the whole group is killed on discard); phosd blocks SIGINT/SIGTERM and
  // ignores SIGPIPE, which the function must not inherit.
  sigset_t empty;
  sigset_t all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, spec.executable.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(sv[1]);
  close(log_fd);
  if (rc != 0) {
    close(sv[0]);
    unlink(tmp_log.c_str());
    return Status::Unavailable("spawn '" + spec.executable + "': " + std::strerror(rc));
  }
  InstanceProcess process;
  process.pid = pid;
  process.channel_fd = sv[0];
  process.log_path = logs_dir + "/" + spec.name + "-" + std::to_string(pid) + ".log";
  if (std::rename(tmp_log.c_str(), process.log_path.c_str()) != 0) process.log_path = tmp_log;
  return process;
}

std::string EndInstanceProcess(pid_t pid, std::chrono::milliseconds grace) {
  auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      kill(-pid, SIGKILL);  // anything the function left behind in its group
      return Describe(status);
    }
    if (r < 0 && errno != EINTR) return std::string("not reapable: ") + std::strerror(errno);
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(-pid, SIGKILL);
  // A forked instance makes itself its group's leader right after its fork: killed before that,
  // the group does not exist yet, so the process itself is killed too.
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return Describe(status);
}

}  // namespace phos::runtime
