// runtime/src/cgroups.cc against fake cgroup trees in a temporary directory (mountinfo files that
// point into it), and once against this machine's own hierarchies.
#include "cgroups.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class CgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) / ("phos-cgroups-" + std::to_string(getpid()) + "-" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A mountinfo line of a mount of `fstype` at <root>/<dir> with super options `super`.
  std::string Mount(const std::string& dir, const std::string& fstype, const std::string& super,
                    const std::string& mount_root = "/") {
    fs::create_directories(root_ / dir);
    return "40 31 0:38 " + mount_root + " " + (root_ / dir).string() + " rw,relatime shared:9 - " + fstype +
           " " + fstype + " " + super + "\n";
  }
  std::string WriteMountinfo(const std::string& text) {
    std::string path = (root_ / "mountinfo").string();
    std::ofstream(path) << text;
    return path;
  }

  fs::path root_;
};

TEST_F(CgroupsTest, TakesV1HierarchiesWhenTheV2TreeHasNoControllers) {
  // This machine class: v1 memory, pids and cpu (co-mounted with cpuacct) plus an empty v2 tree.
  std::string text = Mount("memory", "cgroup", "rw,memory") + Mount("pids", "cgroup", "rw,pids") +
                     Mount("cpu,cpuacct", "cgroup", "rw,cpu,cpuacct") + Mount("unified", "cgroup2", "rw");
  std::ofstream(root_ / "unified" / "cgroup.controllers") << "\n";
  Result<CgroupLayout> layout = DetectCgroupLayout(WriteMountinfo(text));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE(layout->complete());
  EXPECT_EQ(layout->memory.mount, (root_ / "memory").string());
  EXPECT_FALSE(layout->memory.v2);
  EXPECT_EQ(layout->cpu.mount, (root_ / "cpu,cpuacct").string());
  EXPECT_EQ(layout->pids.mount, (root_ / "pids").string());
}

TEST_F(CgroupsTest, TakesTheV2TreeForTheControllersItLists) {
  std::string text = Mount("unified", "cgroup2", "rw,nsdelegate") + Mount("memory", "cgroup", "rw,memory");
  std::ofstream(root_ / "unified" / "cgroup.controllers") << "cpuset cpu io pids\n";
  Result<CgroupLayout> layout = DetectCgroupLayout(WriteMountinfo(text));
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(layout->cpu.v2);
  EXPECT_TRUE(layout->pids.v2);
  EXPECT_EQ(layout->cpu.mount, (root_ / "unified").string());
  EXPECT_FALSE(layout->memory.v2);  // not listed by v2: the v1 hierarchy has it
}

TEST_F(CgroupsTest, MissingControllersAndNestedViewsLeaveTheLayoutIncomplete) {
  // A v1 memory mount of a nested group (root "/docker/x") cannot be used as the root.
  std::string text = Mount("memory", "cgroup", "rw,memory", "/docker/x") + Mount("pids", "cgroup", "rw,pids");
  Result<CgroupLayout> layout = DetectCgroupLayout(WriteMountinfo(text));
  ASSERT_TRUE(layout.ok());
  EXPECT_FALSE(layout->complete());
  EXPECT_TRUE(layout->memory.mount.empty());
  EXPECT_NE(layout->Describe().find("cpu: none"), std::string::npos) << layout->Describe();
  EXPECT_EQ(FunctionCgroups::Open(*layout, "phos-test").status().code(), StatusCode::kNotSupported);
  EXPECT_FALSE(DetectCgroupLayout((root_ / "absent").string()).ok());
}

TEST_F(CgroupsTest, V1GroupsGetTheLimitsInTheirFilesAndOneProcsFilePerHierarchy) {
  CgroupLayout layout;
  layout.memory = {(root_ / "memory").string(), false};
  layout.pids = {(root_ / "pids").string(), false};
  layout.cpu = {(root_ / "cpu").string(), false};
  Result<std::unique_ptr<FunctionCgroups>> groups = FunctionCgroups::Open(layout, "phos-test");
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  Result<std::vector<std::string>> join =
      (*groups)->Create("mlp", {.memory_bytes = 64 << 20, .pids = 32, .cpu_millis = 1500});
  ASSERT_TRUE(join.ok()) << join.status().ToString();
  EXPECT_EQ(*join, (std::vector<std::string>{(root_ / "memory/phos-test/mlp/cgroup.procs").string(),
                                             (root_ / "pids/phos-test/mlp/cgroup.procs").string(),
                                             (root_ / "cpu/phos-test/mlp/cgroup.procs").string()}));
  EXPECT_EQ(Slurp((root_ / "memory/phos-test/mlp/memory.limit_in_bytes").string()), "67108864");
  EXPECT_EQ(Slurp((root_ / "pids/phos-test/mlp/pids.max").string()), "32");
  EXPECT_EQ(Slurp((root_ / "cpu/phos-test/mlp/cpu.cfs_period_us").string()), "100000");
  EXPECT_EQ(Slurp((root_ / "cpu/phos-test/mlp/cpu.cfs_quota_us").string()), "150000");
  EXPECT_FALSE((*groups)->Create("../escape", {}).ok());
  EXPECT_FALSE((*groups)->Create("", {}).ok());
}

TEST_F(CgroupsTest, V2GroupsShareOneDirectoryAndTheParentEnablesTheControllers) {
  CgroupLayout layout;
  layout.memory = layout.pids = layout.cpu = {(root_ / "unified").string(), true};
  fs::create_directories(root_ / "unified");
  std::ofstream(root_ / "unified" / "memory.swap.max");  // present where swap is accounted
  Result<std::unique_ptr<FunctionCgroups>> groups = FunctionCgroups::Open(layout, "phos-test");
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  EXPECT_EQ(Slurp((root_ / "unified/cgroup.subtree_control").string()), "+memory +pids +cpu");
  EXPECT_EQ(Slurp((root_ / "unified/phos-test/cgroup.subtree_control").string()), "+memory +pids +cpu");
  Result<std::vector<std::string>> join =
      (*groups)->Create("mlp", {.memory_bytes = 1 << 20, .cpu_millis = 250});
  ASSERT_TRUE(join.ok()) << join.status().ToString();
  EXPECT_EQ(*join, std::vector<std::string>{(root_ / "unified/phos-test/mlp/cgroup.procs").string()});
  EXPECT_EQ(Slurp((root_ / "unified/phos-test/mlp/memory.max").string()), "1048576");
  EXPECT_EQ(Slurp((root_ / "unified/phos-test/mlp/cpu.max").string()), "25000 100000");
  EXPECT_FALSE(fs::exists(root_ / "unified/phos-test/mlp/pids.max"));  // no limit asked: none written
}

// The real hierarchies: a process that joins a group with a pids limit cannot fork past it, and
// Remove kills what runs in the group before removing it.
TEST(CgroupsOnThisMachine, ALimitHoldsAndRemoveEndsTheGroupsProcesses) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: cannot create cgroups";
  Result<CgroupLayout> layout = DetectCgroupLayout("/proc/self/mountinfo");
  ASSERT_TRUE(layout.ok());
  if (!layout->complete()) GTEST_SKIP() << "cgroup controllers missing: " << layout->Describe();
  const std::string parent = "phos-cgroups-test-" + std::to_string(getpid());
  Result<std::unique_ptr<FunctionCgroups>> groups = FunctionCgroups::Open(*layout, parent);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  Result<std::vector<std::string>> join = (*groups)->Create("fn", {.memory_bytes = 64 << 20, .pids = 4});
  ASSERT_TRUE(join.ok()) << join.status().ToString();

  int result_pipe[2];
  ASSERT_EQ(pipe(result_pipe), 0);
  pid_t child = fork();
  if (child == 0) {
    // Joins, then forks until refused and reports how many forks succeeded; stays in the group.
    for (const std::string& procs : *join) std::ofstream(procs) << "0";
    int forked = 0;
    while (forked < 64) {
      pid_t pid = fork();
      if (pid == 0) {
        pause();
        _exit(0);
      }
      if (pid < 0) break;
      ++forked;
    }
    ssize_t ignored = write(result_pipe[1], &forked, sizeof(forked));
    (void)ignored;
    pause();
    _exit(0);
  }
  close(result_pipe[1]);
  int forked = -1;
  ASSERT_EQ(read(result_pipe[0], &forked, sizeof(forked)), static_cast<ssize_t>(sizeof(forked)));
  close(result_pipe[0]);
  // The group holds its limit of 4 tasks: the child and its forks, and whatever threads a runtime
  // adds to them (ThreadSanitizer's own thread), so the forks number 3 or fewer.
  EXPECT_GE(forked, 1);
  EXPECT_LE(forked, 3);
  long tasks = -1;
  for (const std::string& procs : *join) {
    std::ifstream current(fs::path(procs).parent_path() / "pids.current");
    if (current) current >> tasks;
  }
  ASSERT_GE(tasks, 0) << "no pids.current beside the group's cgroup.procs files";
  EXPECT_EQ(tasks, 4);

  EXPECT_TRUE((*groups)->Remove("fn").ok());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const std::string& dir : (*groups)->Directories("fn")) EXPECT_FALSE(fs::exists(dir)) << dir;
  (*groups)->RemoveAll();
  for (const std::string& dir : (*groups)->Directories("")) EXPECT_FALSE(fs::exists(dir)) << dir;
}

}  // namespace
}  // namespace phos::runtime
