// Starts a real phosd on simgpu for a test, and runs phos-fn and curl against it.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace phos::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // standard output
};

// Runs argv (no shell), capturing standard output; standard error goes to the test log.
CommandResult Run(const std::vector<std::string>& argv);
// A loopback port the kernel just handed out (phosd binds it again at once).
int FreePort();
// argv/envp for posix_spawn: pointers into `args`, null-terminated.
std::vector<char*> Argv(const std::vector<std::string>& args);

class PhosdTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // "http://127.0.0.1:<port>"
  const std::string& endpoint() const { return endpoint_; }
  // phos-fn --endpoint <endpoint> args...
  CommandResult PhosFn(const std::vector<std::string>& args);
  // curl -s -X POST --data <body> <endpoint><path>; the response body.
  CommandResult CurlPost(const std::string& path, const std::string& body);

 private:
  std::string data_dir_;
  std::string endpoint_;
  int pid_ = -1;
};

}  // namespace phos::testing
