// A test client started with a given environment, its stdin and stdout on pipes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/subprocess.h"

namespace phos::testing {

class PipedProcess {
 public:
  // `env`: variables set on top of the test's environment.
  PipedProcess(const std::vector<std::string>& argv, std::vector<std::pair<std::string, std::string>> env) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2 failed";
      return;
    }
    SpawnOptions options;
    options.argv = argv;
    options.env = std::move(env);
    options.fds = {{in[0], STDIN_FILENO}, {out[1], STDOUT_FILENO}};
    Result<Subprocess> spawned = Subprocess::Spawn(options);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    if (!spawned.ok()) {
      ADD_FAILURE() << spawned.status().ToString();
      return;
    }
    process_.emplace(std::move(spawned).value());
  }
  PipedProcess(const PipedProcess&) = delete;
  PipedProcess& operator=(const PipedProcess&) = delete;
  // The process, if still running, is killed and reaped (Subprocess) before its pipes close.
  ~PipedProcess() {
    process_.reset();
    if (stdin_ >= 0) close(stdin_);
    if (stdout_ >= 0) close(stdout_);
  }

  // One line of the child's stdout, without the newline ("" at end of file).
  std::string ReadLine() {
    std::string line;
    char c;
    while (read(stdout_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  void WriteLine(const std::string& line) {
    std::string l = line + "\n";
    [[maybe_unused]] ssize_t n = write(stdin_, l.data(), l.size());
  }
  // The exit code, or 128 + signal; -1 when the process could not be started or waited for.
  int Wait() {
    if (!process_) return -1;
    Result<ExitStatus> how = process_->Wait();
    EXPECT_TRUE(how.ok()) << how.status().ToString();
    return how.ok() ? how->ShellCode() : -1;
  }

 private:
  std::optional<Subprocess> process_;
  int stdin_ = -1;
  int stdout_ = -1;
};

}  // namespace phos::testing
