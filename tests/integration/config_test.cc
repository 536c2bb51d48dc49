// phosd's settings from a TOML file (--config), PHOS_* variables and flags, in that order of
// precedence, as --print-config shows them; the sample of packaging/ reads; a printed config runs
// phosd as given; a key phosd does not know is refused.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../testing/wait_until.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

// phosd --print-config with `args` and `env`: exit code and what it printed.
CommandResult PrintConfig(std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env = {}) {
  args.insert(args.begin(), PHOS_PHOSD);
  args.push_back("--print-config");
  Result<CommandOutput> run = RunCommand({.argv = args, .env = env, .stderr_to_stdout = true}, std::chrono::minutes(1));
  if (!run.ok()) return {};
  return {run->status.ShellCode(), run->output};
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name + "-" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << text;
  return path;
}

TEST(PhosdConfigTest, FlagsWinOverVariablesWhichWinOverTheFile) {
  const std::string file = Write("phosd-config", "listen = \"127.0.0.1:7099\"\npool-max = 3\npool-min = 1\n");
  CommandResult from_file = PrintConfig({"--config", file});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.out;
  EXPECT_NE(from_file.out.find("listen=\"127.0.0.1:7099\"\n"), std::string::npos) << from_file.out;
  EXPECT_NE(from_file.out.find("pool-max=3\n"), std::string::npos) << from_file.out;
  CommandResult variable = PrintConfig({"--config", file}, {{"PHOS_POOL_MAX", "4"}});
  EXPECT_NE(variable.out.find("pool-max=4\n"), std::string::npos) << variable.out;
  EXPECT_NE(variable.out.find("pool-min=1\n"), std::string::npos) << variable.out;  // the file's, untouched
  CommandResult flag = PrintConfig({"--config", file, "--pool-max", "6"}, {{"PHOS_POOL_MAX", "4"}});
  EXPECT_NE(flag.out.find("pool-max=6\n"), std::string::npos) << flag.out;
  std::remove(file.c_str());
}

TEST(PhosdConfigTest, TheSampleReadsAndAnUnknownKeyIsRefused) {
  CommandResult sample = PrintConfig({"--config", PHOS_SOURCE_DIR "/packaging/phosd.toml"});
  ASSERT_EQ(sample.exit_code, 0) << sample.out;
  EXPECT_NE(sample.out.find("data-dir=\"/var/lib/phos\"\n"), std::string::npos) << sample.out;
  const std::string bogus = Write("phosd-bogus", "pool-size = 3\n");
  CommandResult refused = PrintConfig({"--config", bogus});
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.out.find("pool-size"), std::string::npos) << refused.out;
  std::remove(bogus.c_str());
}

// What --print-config prints is a config phosd runs with: settings and all.
TEST(PhosdConfigTest, APrintedConfigRunsPhosdAsItSays) {
  char dir[] = "/tmp/phosd-config-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const int port = FreePort();
  CommandResult printed = PrintConfig({"--data-dir", dir, "--listen", "127.0.0.1:" + std::to_string(port), "--gpu",
                                       "sim", "--functions-dir", BuildBinDir(), "--pool-min", "1"});
  ASSERT_EQ(printed.exit_code, 0) << printed.out;
  const std::string file = Write("phosd-printed", printed.out);
  Result<Subprocess> phosd =
      Subprocess::Spawn({.argv = {PHOS_PHOSD, "--config", file}, .stdout_file = std::string(dir) + ".log",
                         .stderr_to_stdout = true});
  ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
  const std::string health = "http://127.0.0.1:" + std::to_string(port) + "/healthz";
  EXPECT_TRUE(WaitUntil([&] { return ::phos::testing::Run({"/usr/bin/curl", "-sf", health}).exit_code == 0; }));
  Result<ExitStatus> stopped = phosd->Stop(kPhosdStopGrace, SIGTERM);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_TRUE(stopped->success()) << stopped->ToString();
  std::remove(file.c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(std::string(dir) + ".log", ec);
}

}  // namespace
}  // namespace phos::testing
