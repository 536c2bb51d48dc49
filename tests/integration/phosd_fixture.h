// Starts a real phosd on simgpu for a test, and runs phos-fn and curl against it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "phos/base/subprocess.h"

namespace phos::testing {

// How long a phosd asked to stop may take before it is killed (and the test fails).
inline constexpr std::chrono::milliseconds kPhosdStopGrace{60000};

struct CommandResult {
  int exit_code = -1;  // the exit code, 128 + signal when killed, -1 when it could not start
  std::string out;     // standard output
};

// Runs argv (no shell), capturing standard output; standard error goes to the test log.
CommandResult Run(const std::vector<std::string>& argv);
// A loopback port the kernel just handed out (phosd binds it again at once).
int FreePort();

class PhosdTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Options phosd is started with besides --listen, --data-dir and --gpu.
  virtual std::vector<std::string> ExtraPhosdArgs() const { return {}; }

  // "http://127.0.0.1:<port>"
  const std::string& endpoint() const { return endpoint_; }
  // phos-fn --endpoint <endpoint> args...
  CommandResult PhosFn(const std::vector<std::string>& args);
  // curl -s -X POST --data <body> <endpoint><path>; the response body.
  CommandResult CurlPost(const std::string& path, const std::string& body);
  // phosd's --data-dir (its snapshot store is in <data_dir>/store).
  const std::string& data_dir() const { return data_dir_; }

 private:
  std::string data_dir_;
  std::string endpoint_;
  std::optional<Subprocess> phosd_;
};

}  // namespace phos::testing
