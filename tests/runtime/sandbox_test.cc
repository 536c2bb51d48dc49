// runtime/src/sandbox.cc: the sandbox ids, the mode option, and the bubblewrap command line a
// function is started with (what it sees, what it does not).
#include "phos/runtime/sandbox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace phos::runtime {
namespace {

// Whether `argv` holds `sequence` as consecutive arguments.
bool HasSequence(const std::vector<std::string>& argv, const std::vector<std::string>& sequence) {
  return std::search(argv.begin(), argv.end(), sequence.begin(), sequence.end()) != argv.end();
}

TEST(SandboxIdsTest, ParsesARangeAndRefusesBadOnes) {
  Result<SandboxIds> ids = SandboxIds::Parse("300000-300009");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->first, 300000u);
  EXPECT_EQ(ids->last, 300009u);
  for (const char* bad : {"", "300000", "300000-", "-5", "5-5", "9-5", "0-10", "1-2147483647", "1-x", "1-2-3",
                          " 1-2", "1-18446744073709551617"}) {
    EXPECT_EQ(SandboxIds::Parse(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SandboxIdsTest, AFunctionsUidIsStableInTheRangeAndNeverTheSocketGroup) {
  SandboxIds ids{1000, 1002};  // two function ids: 1001 and 1002
  for (const char* name : {"a", "b", "mlp", "llama-7b", "x.y_z"}) {
    uid_t uid = ids.ForFunction(name);
    EXPECT_EQ(uid, ids.ForFunction(name)) << name;
    EXPECT_TRUE(uid == 1001 || uid == 1002) << name << " " << uid;
    EXPECT_TRUE(ids.Contains(uid));
  }
  EXPECT_TRUE(ids.Contains(ids.socket_group()));
  EXPECT_FALSE(ids.Contains(999));
  EXPECT_FALSE(ids.Contains(1003));
  EXPECT_FALSE(ids.Contains(0));
  EXPECT_NE(SandboxIds{}.ForFunction("alpha"), SandboxIds{}.ForFunction("beta"));
}

TEST(SandboxModeTest, ParsesTheThreeModes) {
  EXPECT_EQ(*ParseSandboxMode("auto"), SandboxMode::kAuto);
  EXPECT_EQ(*ParseSandboxMode("on"), SandboxMode::kOn);
  EXPECT_EQ(*ParseSandboxMode("off"), SandboxMode::kOff);
  EXPECT_FALSE(ParseSandboxMode("yes").ok());
}

TEST(SandboxArgvTest, HidesTheDataDirectoryButItsSocketAndDropsToTheFunctionsUser) {
  SandboxOptions options{.data_dir = "/var/lib/phos"};
  FunctionSpec spec{.name = "mlp", .executable = "/opt/fns/mlp"};
  std::vector<std::string> argv = Sandbox::SandboxArgv(options, spec, 200123, 200000);
  EXPECT_EQ(argv.front(), "bwrap");
  EXPECT_EQ(argv.back(), "--");  // the function's own argv follows
  for (const char* ns : {"--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"}) {
    EXPECT_NE(std::find(argv.begin(), argv.end(), ns), argv.end()) << ns;
  }
  EXPECT_TRUE(HasSequence(argv, {"--ro-bind", "/", "/", "--tmpfs", "/var/lib/phos"}));
  EXPECT_TRUE(HasSequence(
      argv, {"--tmpfs", "/run", "--setenv", "TMPDIR", "/run", "--chdir", "/run", "--perms", "0755", "--dir",
             "/run/phos", "--bind", "/var/lib/phos/gpu.sock", Sandbox::kSocketInside}));
  EXPECT_TRUE(HasSequence(argv, {"--ro-bind", "/opt/fns/mlp", "/opt/fns/mlp"}));
  EXPECT_TRUE(HasSequence(argv, {"--dev", "/dev", "--proc", "/proc"}));
  EXPECT_TRUE(HasSequence(argv, {"--perms", "1777", "--tmpfs", "/run"}));
  // Every capability dropped before the three setpriv needs are added back.
  auto drop = std::find(argv.begin(), argv.end(), "--cap-drop");
  auto add = std::find(argv.begin(), argv.end(), "--cap-add");
  ASSERT_NE(drop, argv.end());
  EXPECT_LT(drop, add);
  EXPECT_TRUE(HasSequence(argv, {"setpriv", "--reuid=200123", "--regid=200123", "--groups=200000",
                                 "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"}));
}

// An uploaded artifact lies in the hidden data directory, whose ancestors the function's uid may not
// traverse: it is bound at a path of the sandbox's own, and started from there.
TEST(SandboxArgvTest, AnArtifactInTheDataDirectoryRunsFromAPathOfTheSandboxsOwn) {
  SandboxOptions options{.data_dir = "/root/phos"};
  FunctionSpec spec{.name = "mlp", .executable = "/root/phos/artifacts/0a1b"};
  EXPECT_EQ(Sandbox::ExecutableInside(options, spec), Sandbox::kExecutableInside);
  std::vector<std::string> argv = Sandbox::SandboxArgv(options, spec, 200123, 200000);
  EXPECT_TRUE(HasSequence(argv, {"--ro-bind", "/root/phos/artifacts/0a1b", Sandbox::kExecutableInside}));
  EXPECT_FALSE(HasSequence(argv, {"--ro-bind", "/root/phos/artifacts/0a1b", "/root/phos/artifacts/0a1b"}));
  // Bound once /run/phos exists (bubblewrap applies its options in order).
  auto dir = std::find(argv.begin(), argv.end(), "/run/phos");
  auto bound = std::find(argv.begin(), argv.end(), Sandbox::kExecutableInside);
  EXPECT_LT(dir, bound);
  // A program elsewhere keeps its path.
  FunctionSpec outside{.name = "fn", .executable = "/root/phos-other/fn"};
  EXPECT_EQ(Sandbox::ExecutableInside(options, outside), "/root/phos-other/fn");
}

TEST(SandboxArgvTest, TheNetworkIsSharedOnlyWhenTheSpecAllowsIt) {
  SandboxOptions options{.data_dir = "/d"};
  FunctionSpec spec{.name = "web", .executable = "/bin/web", .network = true};
  std::vector<std::string> argv = Sandbox::SandboxArgv(options, spec, 200001, 200000);
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--unshare-net"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--unshare-pid"), argv.end());
}

TEST(SandboxTest, OffConfinesNothing) {
  Result<std::unique_ptr<Sandbox>> sandbox = Sandbox::Open({.mode = SandboxMode::kOff});
  ASSERT_TRUE(sandbox.ok());
  EXPECT_FALSE((*sandbox)->enabled());
  EXPECT_FALSE((*sandbox)->why_off().empty());
  SpawnOptions spawn;
  spawn.argv = {"/bin/fn", "--x"};
  FunctionSpec spec{.name = "fn", .executable = "/bin/fn"};
  EXPECT_TRUE((*sandbox)->PrepareFunction(spec).ok());
  EXPECT_TRUE((*sandbox)->Confine(spec, &spawn).ok());
  EXPECT_EQ(spawn.argv, (std::vector<std::string>{"/bin/fn", "--x"}));
}

TEST(SandboxTest, OnFailsWithTheReasonWhenItCannotSandbox) {
  // A bubblewrap that is not there: auto turns the sandbox off, on refuses to start.
  SandboxOptions options{.mode = SandboxMode::kOn,
                         .data_dir = "/",
                         .bwrap = "/nonexistent/bwrap",
                         .mountinfo = "/nonexistent/mountinfo"};
  Result<std::unique_ptr<Sandbox>> on = Sandbox::Open(options);
  ASSERT_FALSE(on.ok());
  EXPECT_NE(on.status().message().find("--sandbox on"), std::string::npos) << on.status().ToString();
  options.mode = SandboxMode::kAuto;
  Result<std::unique_ptr<Sandbox>> automatic = Sandbox::Open(options);
  ASSERT_TRUE(automatic.ok());
  EXPECT_FALSE((*automatic)->enabled());
  EXPECT_EQ("--sandbox on: " + (*automatic)->why_off(), on.status().message());
}

}  // namespace
}  // namespace phos::runtime
