// Sandboxed functions (phosd --sandbox on) end to end, with the sandbox probe function: what a
// function must not be able to do fails, what it may do works, and its cgroup limits hold.
#include "phos/runtime/sandbox.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "phosd_fixture.h"

namespace phos::testing {
namespace {

// Why this machine cannot run sandboxes ("" when it can): the same conditions phosd checks.
std::string WhyNoSandbox() {
  if (geteuid() != 0) return "not root: phosd cannot give functions their own uid";
  CommandResult trial = Run({"bwrap", "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "/bin/true"});
  if (trial.exit_code != 0)
    return "bubblewrap cannot make a sandbox here (exit " + std::to_string(trial.exit_code) + ")";
  return "";
}

// The host pids of processes running as `uid`.
std::vector<pid_t> PidsOfUid(uid_t uid) {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  while (dirent* entry = proc != nullptr ? readdir(proc) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream status(std::string("/proc/") + entry->d_name + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Uid:", 0) == 0) {
        if (std::stoul(line.substr(4)) == uid) pids.push_back(pid);
        break;
      }
    }
  }
  if (proc != nullptr) closedir(proc);
  return pids;
}

// The directory of the cgroup that `pid` is in for the cpu controller, as this (root cgroup
// namespace) process sees it: the group's path from /proc/PID/cgroup under the hierarchy's mount
// from /proc/self/mountinfo (a v1 hierarchy whose options name cpu, else the unified one). "" when
// not found.
std::string CpuGroupDir(pid_t pid) {
  auto has_cpu = [](const std::string& list) {
    std::stringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      if (item == "cpu") return true;
    }
    return false;
  };
  std::string group;
  bool v2 = false;
  std::ifstream cgroups("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    if (has_cpu(controllers)) {
      group = line.substr(second + 1);
      v2 = false;
      break;
    }
    if (line.rfind("0::", 0) == 0) {
      group = line.substr(3);
      v2 = true;
    }
  }
  if (group.empty()) return "";
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    std::stringstream fields(line);
    std::vector<std::string> f;
    for (std::string field; fields >> field;) f.push_back(field);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4 || f[3] != "/") continue;
    const std::string& fstype = dash[1];
    if ((v2 && fstype == "cgroup2") || (!v2 && fstype == "cgroup" && has_cpu(dash[3]))) return f[4] + group;
  }
  return "";
}

// One counter of a cgroup's cpu.stat ("nr_throttled 3" lines); -1 when absent.
long CpuStat(const std::string& dir, const std::string& key) {
  std::ifstream stat(dir + "/cpu.stat");
  for (std::string name; stat >> name;) {
    long value = -1;
    stat >> value;
    if (name == key) return value;
  }
  return -1;
}

class SandboxTest : public PhosdTest {
 protected:
  void SetUp() override {
    if (std::string why = WhyNoSandbox(); !why.empty()) GTEST_SKIP() << why;
    PhosdTest::SetUp();
  }
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--sandbox", "on"}; }

  // Deploys the probe function as `name` with `extra` spec fields; fails the test when refused.
  void Deploy(const std::string& name, nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json spec = {{"name", name}, {"executable", PHOS_SANDBOX_PROBE_FN}};
    spec.update(extra);
    CommandResult r = CurlPost("/v1/functions", spec.dump());
    ASSERT_EQ(r.exit_code, 0);
    ASSERT_EQ(r.out.find("error"), std::string::npos) << r.out;
  }
  std::string Invoke(const std::string& name, const std::string& request) {
    return CurlPost("/v1/functions/" + name + "/invoke", request).out;
  }
};

TEST_F(SandboxTest, RunsAsItsOwnUnprivilegedUid) {
  Deploy("probe");
  const uid_t uid = runtime::SandboxIds{}.ForFunction("probe");
  EXPECT_EQ(Invoke("probe", "uid"), std::to_string(uid));
  EXPECT_TRUE(runtime::SandboxIds{}.Contains(uid));
  EXPECT_NE(uid, runtime::SandboxIds{}.socket_group());
}

TEST_F(SandboxTest, CannotReadPhosdsDataDirectoryButReadsTheSystem) {
  // Readable by anyone by its mode: only the sandbox's view hides it.
  const std::string secret = data_dir() + "/secret";
  std::ofstream(secret) << "not for functions";
  ASSERT_EQ(chmod(secret.c_str(), 0644), 0);
  Deploy("probe");
  EXPECT_EQ(Invoke("probe", "read:" + secret).rfind("failed: ", 0), 0u) << Invoke("probe", "read:" + secret);
  EXPECT_EQ(Invoke("probe", "read:" + data_dir() + "/functions.json").rfind("failed: ", 0), 0u);
  EXPECT_EQ(Invoke("probe", "read:/etc/passwd").rfind("read ", 0), 0u) << Invoke("probe", "read:/etc/passwd");
}

// "network": true shares the host's network: a listener on the host's loopback is reachable.
// Without it the function's loopback is its own, where nothing listens.
TEST_F(SandboxTest, ReachesTheHostNetworkOnlyWhenItsSpecAllows) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 8), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  Deploy("closed");
  Deploy("open", {{"network", true}});
  EXPECT_EQ(Invoke("closed", "connect:" + port), "failed: Connection refused");
  EXPECT_EQ(Invoke("open", "connect:" + port), "connected");
  close(listener);
}

TEST_F(SandboxTest, CannotSignalAnotherFunctionsInstance) {
  Deploy("alpha");
  Deploy("beta");
  const uid_t beta = runtime::SandboxIds{}.ForFunction("beta");
  ASSERT_NE(runtime::SandboxIds{}.ForFunction("alpha"), beta);
  ASSERT_EQ(Invoke("beta", "uid"), std::to_string(beta));  // an instance of beta runs
  std::vector<pid_t> victims = PidsOfUid(beta);
  ASSERT_FALSE(victims.empty());
  for (pid_t pid : victims) {
    // Not in alpha's PID namespace at all.
    EXPECT_EQ(Invoke("alpha", "kill:" + std::to_string(pid)), "failed: No such process") << pid;
  }
  // Its own pid it can signal: the probe's kill works.
  EXPECT_EQ(Invoke("alpha", "kill:" + Invoke("alpha", "pid")), "signalled");
  EXPECT_EQ(Invoke("beta", "uid"), std::to_string(beta));
}

TEST_F(SandboxTest, PastItsMemoryLimitAnInstanceIsKilledAndTheNextRequestGetsAFreshOne) {
  Deploy("probe", {{"limits", {{"memory_mib", 96}}}});
  EXPECT_EQ(Invoke("probe", "alloc:8"), "allocated");
  EXPECT_NE(Invoke("probe", "alloc:512"), "allocated");
  EXPECT_EQ(Invoke("probe", "after"), "after");
  EXPECT_EQ(Invoke("probe", "alloc:8"), "allocated");
}

TEST_F(SandboxTest, ItsPidsLimitStopsAForkBomb) {
  Deploy("probe", {{"limits", {{"pids", 16}}}});
  const std::string answer = Invoke("probe", "fork:200");
  EXPECT_EQ(answer.rfind("forked ", 0), 0u) << answer;
  EXPECT_NE(answer.find("; failed: Resource temporarily unavailable"), std::string::npos) << answer;
  EXPECT_EQ(Invoke("probe", "after"), "after");
}

// Counted, not timed: a group held to 10% of a CPU that spends 300 ms of CPU time is throttled in
// some of the 100 ms periods it spans, and the kernel counts each.
TEST_F(SandboxTest, ItsCpuLimitThrottlesItsInstances) {
  Deploy("probe", {{"limits", {{"cpu_millis", 100}}}});
  // This phosd's: a test running beside it may run a "probe" of its own, as the same uid.
  const std::string parent = runtime::Sandbox::CgroupParent(std::filesystem::canonical(data_dir()).string());
  auto ours = [&] {
    std::vector<pid_t> pids;
    for (pid_t pid : PidsOfUid(runtime::SandboxIds{}.ForFunction("probe"))) {
      if (CpuGroupDir(pid).find("/" + parent + "/") != std::string::npos) pids.push_back(pid);
    }
    return pids;
  };
  const std::vector<pid_t> pids = ours();
  ASSERT_FALSE(pids.empty());
  const std::string dir = CpuGroupDir(pids.front());
  ASSERT_FALSE(dir.empty()) << "no cpu cgroup found for pid " << pids.front();
  ASSERT_NE(dir.find("/probe"), std::string::npos) << dir << ": not the function's group";
  const long before = CpuStat(dir, "nr_throttled");
  ASSERT_GE(before, 0) << dir << "/cpu.stat";
  EXPECT_EQ(Invoke("probe", "spin:300"), "spun");
  EXPECT_GT(CpuStat(dir, "nr_throttled"), before) << dir;
  for (pid_t pid : ours()) EXPECT_EQ(CpuGroupDir(pid), dir) << pid;
}

TEST_F(SandboxTest, LimitsOutOfRangeAreRefused) {
  for (const char* limits : {R"({"memory_mib": -1})", R"({"pids": 1e9})", R"({"cpu_millis": "1000"})",
                             R"({"disk_mib": 1})", R"([1])", R"({"memory_mib": 18446744073709551615})"}) {
    nlohmann::json spec = {{"name", "probe"}, {"executable", PHOS_SANDBOX_PROBE_FN}};
    spec["limits"] = nlohmann::json::parse(limits);
    EXPECT_NE(CurlPost("/v1/functions", spec.dump()).out.find("limits"), std::string::npos) << limits;
  }
}

}  // namespace
}  // namespace phos::testing
