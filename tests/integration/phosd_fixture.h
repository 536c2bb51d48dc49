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
// Where phosd, phos-fn and the functions the tests deploy are built (build/bin): every test's
// phosd is started with --functions-dir there.
std::string BuildBinDir();
// The admin token phosd keeps in `data_dir` (made at its first start); empty when there is none.
std::string AdminToken(const std::string& data_dir);

class PhosdTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Options phosd is started with besides --listen, --data-dir, --gpu and --functions-dir.
  virtual std::vector<std::string> ExtraPhosdArgs() const { return {}; }

  // "http://127.0.0.1:<port>"
  const std::string& endpoint() const { return endpoint_; }
  // phos-fn --endpoint <endpoint> --token-file <data_dir>/admin.token args...
  CommandResult PhosFn(const std::vector<std::string>& args);
  // curl -s -X POST --data <body> <endpoint><path> with the admin token; the response body.
  CommandResult CurlPost(const std::string& path, const std::string& body);
  // curl's arguments that send the admin token: {"-H", "Authorization: Bearer <token>"}.
  std::vector<std::string> AdminHeader() const;
  // The admin token phosd made at start.
  const std::string& admin_token() const { return admin_token_; }
  // phosd's --data-dir (its snapshot store is in <data_dir>/store).
  const std::string& data_dir() const { return data_dir_; }

 private:
  std::string data_dir_;
  std::string endpoint_;
  std::string admin_token_;
  std::optional<Subprocess> phosd_;
};

}  // namespace phos::testing
