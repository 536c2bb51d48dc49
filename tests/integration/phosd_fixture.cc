#include "phosd_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "../testing/wait_until.h"

extern char** environ;

namespace phos::testing {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}


CommandResult Run(const std::vector<std::string>& args) {
  CommandResult result;
  int pipefd[2];
  // Close-on-exec: a command started meanwhile by another thread must not inherit this pipe, or
  // reading it would wait for that command to exit too.
  if (pipe2(pipefd, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  pid_t pid = -1;
  std::vector<char*> argv = Argv(args);
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return result;
  }
  char buf[65536];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) result.out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

void PhosdTest::SetUp() {
  char tmpl[] = "/tmp/phosd-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  data_dir_ = tmpl;
  int port = FreePort();
  endpoint_ = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> args = {PHOS_PHOSD, "--listen", "127.0.0.1:" + std::to_string(port), "--data-dir",
                                   data_dir_, "--gpu", "sim"};
  std::vector<char*> argv = Argv(args);
  ASSERT_EQ(posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  // Ready when /healthz answers.
  bool healthy = WaitUntil([&] {
    return ::phos::testing::Run({"/usr/bin/curl", "-sf", endpoint_ + "/healthz"}).exit_code == 0;
  });
  ASSERT_TRUE(healthy) << "phosd did not become healthy at " << endpoint_;
}

void PhosdTest::TearDown() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "phosd did not exit cleanly on SIGTERM";
  }
  std::error_code ec;
  std::filesystem::remove_all(data_dir_, ec);
}

CommandResult PhosdTest::PhosFn(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", endpoint_};
  argv.insert(argv.end(), args.begin(), args.end());
  return ::phos::testing::Run(argv);
}

CommandResult PhosdTest::CurlPost(const std::string& path, const std::string& body) {
  return ::phos::testing::Run({"/usr/bin/curl", "-s", "-X", "POST", "--data", body, endpoint_ + path});
}

}  // namespace phos::testing
