// Faults end to end: a function that crashes at each stage of its life or never answers, a device
// out of memory during a restore, a disk full during a deploy, and phosd killed (kill -9) inside a
// deploy's commit, a restore and a garbage collection. Each case ends with a clear error to the
// caller, a correct answer on retry (fault_fn's fingerprint of its device buffer), the function
// still listed, the store verifying clean, and phosd's descriptors, threads, function processes
// and device memory back where they were.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "../testing/wait_until.h"
#include "fault_fn.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr size_t kMib = 16;  // fault_fn's device buffer

// What phosd holds that a fault could leak.
struct Footprint {
  size_t fds = 0;
  size_t threads = 0;
  std::vector<pid_t> function_processes;
  long long device_memory = -1;  // phos_device_memory_used_bytes; -1 when not exported

  // Nothing more than `baseline` holds: as many function processes and bytes of device memory, no
  // more descriptors or threads (a warm instance restored another way than the baseline's may run
  // without a loader thread, so fewer is no leak).
  bool Within(const Footprint& baseline) const {
    return fds <= baseline.fds && threads <= baseline.threads &&
           function_processes.size() == baseline.function_processes.size() &&
           device_memory == baseline.device_memory;
  }
  std::string ToString() const {
    return "fds " + std::to_string(fds) + ", threads " + std::to_string(threads) + ", function processes " +
           std::to_string(function_processes.size()) + ", device memory " + std::to_string(device_memory);
  }
};

size_t EntriesIn(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

class FaultsTest : public PhosdTest {
 protected:
  // Extra instances of forced restores end soon after their request.
  std::vector<std::string> ExtraPhosdArgs() const override { return {"--keep-alive-ms", "100"}; }

  HttpResponse Invoke(const std::string& function, const std::string& body,
                      std::vector<std::string> headers = {}) {
    return InvokeAt(endpoint(), function, body, std::move(headers));
  }
  // At the phosd of `at` (a thread's request outliving a restart goes to the phosd it was meant for).
  static HttpResponse InvokeAt(const std::string& at, const std::string& function, const std::string& body,
                               std::vector<std::string> headers = {}) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", body};
    for (const std::string& h : headers) argv.insert(argv.end(), {"-H", h});
    argv.push_back(at + "/v1/functions/" + function + "/invoke");
    return ParseCurl(::phos::testing::Run(argv).out);
  }
  // The JSON error of an answer ("" when it has none).
  static std::string ErrorOf(const HttpResponse& r) {
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message")
               ? j["error"]["message"].get<std::string>()
               : "";
  }

  void DeployFaultFn(const std::string& name, const std::vector<std::string>& fn_args = {}) {
    std::vector<std::string> args = {
        "deploy", name,    PHOS_FAULT_FUNCTION, "--instances", "1", "--max-instances", "2",
        "--",     "--mib", std::to_string(kMib)};
    args.insert(args.end(), fn_args.begin(), fn_args.end());
    CommandResult r = PhosFn(args);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  // fault_fn answers its fingerprint, in `mode` ("" for phosd's choice).
  void ExpectCorrectAnswer(const std::string& function, const std::string& mode = "") {
    std::vector<std::string> headers;
    if (!mode.empty()) headers.push_back("X-Phos-Restore-Mode: " + mode);
    HttpResponse r = Invoke(function, "sum", headers);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, expected_) << mode;
  }
  bool Listed(const std::string& function) {
    nlohmann::json j = nlohmann::json::parse(
        ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out, nullptr, false);
    if (j.is_discarded() || !j.contains("functions")) return false;
    for (const auto& f : j["functions"]) {
      if (f.value("name", "") == function) return true;
    }
    return false;
  }
  // Until `function` runs exactly `instances` instances, all idle.
  bool WaitSettled(const std::string& function, int instances) {
    return WaitUntil([&] {
      nlohmann::json j = nlohmann::json::parse(
          ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/v1/functions"}).out, nullptr, false);
      if (j.is_discarded() || !j.contains("functions")) return false;
      for (const auto& f : j["functions"]) {
        if (f.value("name", "") != function || !f.contains("state")) continue;
        const auto& s = f["state"];
        return s.value("idle", -1) == instances && s.value("starting", -1) == 0 && s.value("busy", -1) == 0 &&
               s.value("ending", -1) == 0;
      }
      return false;
    });
  }

  Footprint Measure() {
    Footprint f;
    const std::string proc = "/proc/" + std::to_string(phosd_pid());
    f.fds = EntriesIn(proc + "/fd");
    f.threads = EntriesIn(proc + "/task");
    f.function_processes = FunctionProcessesOf(data_dir());
    static const std::regex kUsed(R"(phos_device_memory_used_bytes\{device="0"\} (\S+))");
    std::string metrics = ::phos::testing::Run({"/usr/bin/curl", "-s", endpoint() + "/metrics"}).out;
    std::smatch m;
    if (std::regex_search(metrics, m, kUsed)) f.device_memory = static_cast<long long>(std::stod(m[1]));
    return f;
  }
  // Brings `function` to the state footprints are compared in: its warm instance has served a
  // request (its GPU session is connected) and a forced restore's instance has ended (the scrub of
  // its context read the device memory the rest holds). Answers are checked elsewhere.
  void Settle(const std::string& function) {
    Invoke(function, "sum", {"X-Phos-Restore-Mode: warm"});
    Invoke(function, "sum", {"X-Phos-Restore-Mode: phos"});
    EXPECT_TRUE(WaitSettled(function, 1));
  }
  Footprint Baseline(const std::string& function) {
    Settle(function);
    Footprint baseline = Measure();
    EXPECT_FALSE(baseline.function_processes.empty()) << "the warm instance is not found among processes";
    return baseline;
  }
  // Threads are joined and contexts scrubbed asynchronously: polled until equal. Without a
  // function, nothing is settled first.
  void ExpectBackTo(const Footprint& baseline, const std::string& function = "") {
    if (!function.empty()) Settle(function);
    Footprint now;
    bool back = WaitUntil([&] {
      now = Measure();
      return now.Within(baseline);
    });
    EXPECT_TRUE(back) << "baseline " << baseline.ToString() << "; now " << now.ToString();
  }

  void ExpectStoreVerifies() {
    CommandResult verify =
        ::phos::testing::Run({PHOS_SNAPSHOT_TOOL, "--store", data_dir() + "/store", "verify"});
    EXPECT_EQ(verify.exit_code, 0) << verify.out;
    EXPECT_EQ(verify.out.find("BAD"), std::string::npos) << verify.out;
  }

  // Kills phosd once it logged that it paused at `point` (phos/base/fault_point.h), and starts it
  // again without pausing; the killed phosd's function processes must not outlive it.
  void KillAtFaultPoint(const std::string& point) {
    const std::string paused = "paused at fault point '" + point + "'";
    ASSERT_TRUE(WaitUntil([&] { return PhosdLog().find(paused) != std::string::npos; }))
        << "phosd never reached " << point;
    const std::vector<pid_t> killed = FunctionProcessesOf(data_dir());
    phosd_env_.clear();
    EXPECT_EQ(RestartPhosd(SIGKILL), 128 + SIGKILL);
    bool gone = WaitUntil([&] {
      std::vector<pid_t> now = FunctionProcessesOf(data_dir());
      return std::none_of(killed.begin(), killed.end(),
                          [&](pid_t p) { return std::find(now.begin(), now.end(), p) != now.end(); });
    });
    EXPECT_TRUE(gone) << "function processes of the killed phosd outlived it";
  }
  // phosd started again with PHOS_FAULT_PAUSE_AT=`point`.
  void RestartPausingAt(const std::string& point) {
    phosd_env_ = {{"PHOS_FAULT_PAUSE_AT", point}};
    EXPECT_EQ(RestartPhosd(SIGTERM), 0);
  }

  const std::string expected_ = fault_fn::ExpectedFingerprint(kMib);
};

// Crashes at each stage of a request, on a warm instance and on restored ones: the caller gets
// phosd's 502 naming the signal (a streamed answer is cut short, not made to look whole), the
// next request is served by a fresh instance with the right answer, and nothing leaks.
TEST_F(FaultsTest, AFunctionCrashingAtEachStageIsReplacedByAFreshInstance) {
  DeployFaultFn("ff");
  ASSERT_TRUE(WaitSettled("ff", 1));
  const Footprint baseline = Baseline("ff");
  ASSERT_GE(baseline.device_memory, static_cast<long long>(kMib << 20)) << "the warm instance's buffer";

  struct Case {
    const char* request;
    const char* mode;
  };
  for (Case c :
       {Case{"crash:restore", "phos"}, Case{"crash:restore", "no-order"}, Case{"crash:response", "phos"},
        Case{"crash:response", "eager"}, Case{"crash:response", "warm"}, Case{"crash:restore", "warm"}}) {
    SCOPED_TRACE(std::string(c.request) + " on a " + c.mode + " instance");
    HttpResponse r = Invoke("ff", c.request, {std::string("X-Phos-Restore-Mode: ") + c.mode});
    EXPECT_EQ(r.status, 502) << r.body;
    // A sandboxed instance is reaped by its sandbox's init: phosd sees that it ended, not how.
    EXPECT_NE(ErrorOf(r).find(Sandboxed() ? "ended in its sandbox" : "killed by signal 6"), std::string::npos)
        << r.body;
    ExpectCorrectAnswer("ff");
    ExpectCorrectAnswer("ff", "phos");
    ExpectBackTo(baseline, "ff");
  }
  // Mid-stream: the head and the first piece went out; the chunked answer ends without its last
  // chunk and the connection closes (curl reports the transfer cut).
  for (const char* mode : {"warm", "phos"}) {
    SCOPED_TRACE(std::string("crash:stream on a ") + mode + " instance");
    CommandResult cut = ::phos::testing::Run(
        {"/usr/bin/curl", "-s", "-i", "--raw", "-X", "POST", "--data-binary", "crash:stream", "-H",
         std::string("X-Phos-Restore-Mode: ") + mode, endpoint() + "/v1/functions/ff/invoke"});
    EXPECT_NE(cut.exit_code, 0) << cut.out;
    HttpResponse r = ParseCurl(cut.out);
    EXPECT_EQ(r.status, 200) << cut.out;
    EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
    EXPECT_EQ(r.body, "6\r\nfirst\n\r\n") << "no last chunk after the cut";
    ExpectCorrectAnswer("ff");
    ExpectBackTo(baseline, "ff");
  }
  EXPECT_TRUE(Listed("ff"));
  ExpectStoreVerifies();
}

// A function that never answers: 504 at the caller's deadline, the instance ended, the next
// request answered.
TEST_F(FaultsTest, AFunctionThatNeverAnswersTimesOutAndIsEnded) {
  DeployFaultFn("ff");
  const Footprint baseline = Baseline("ff");
  for (const char* mode : {"warm", "phos"}) {
    SCOPED_TRACE(mode);
    HttpResponse r =
        Invoke("ff", "hang", {"X-Phos-Timeout-Ms: 300", std::string("X-Phos-Restore-Mode: ") + mode});
    EXPECT_EQ(r.status, 504) << r.body;
    EXPECT_NE(ErrorOf(r).find("did not answer before the deadline"), std::string::npos) << r.body;
    ExpectCorrectAnswer("ff");
    ExpectBackTo(baseline, "ff");
  }
  ExpectStoreVerifies();
}

// A function that crashes before its entry point: the deploy fails with what it said last, it is
// not listed, it leaves no snapshot and nothing running.
TEST_F(FaultsTest, AFunctionCrashingBeforeItsEntryPointFailsItsDeploy) {
  DeployFaultFn("ff");
  const Footprint baseline = Baseline("ff");
  Result<CommandOutput> early =
      RunCommand({.argv = {PHOS_PHOS_FN, "--endpoint", endpoint(), "--token-file", data_dir() + "/admin.token",
                           "deploy", "early", PHOS_FAULT_FUNCTION,
                           "--", "--crash-before-entry"},
                  .stderr_to_stdout = true},
                 std::nullopt);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_FALSE(early->status.success());
  EXPECT_NE(early->output.find("HTTP 502"), std::string::npos) << early->output;
  EXPECT_NE(
      early->output.find("the function failed before its entry point: fault_fn: crashing before the entry "
                         "point as asked"),
      std::string::npos)
      << early->output;
  EXPECT_FALSE(Listed("early"));
  EXPECT_EQ(
      ::phos::testing::Run({PHOS_SNAPSHOT_TOOL, "--store", data_dir() + "/store", "ls"}).out.find("early"),
      std::string::npos);
  ExpectBackTo(baseline, "ff");
  ExpectCorrectAnswer("ff");
  ExpectStoreVerifies();
}

// A device of 40 MiB holds the warm instance's 24 MiB but not a second instance: a forced restore
// fails in every mode with phosd's 502 naming the device out of memory, whether the restore
// copies before the process resumes or while it runs; the warm instance keeps answering; a phosd
// on a bigger device restores it.
class DeviceOutOfMemoryTest : public FaultsTest {
 protected:
  DeviceOutOfMemoryTest() { phosd_env_ = {{"PHOS_SIMGPU_MEMORY", "40M"}}; }
};

TEST_F(DeviceOutOfMemoryTest, ARestoreOutOfDeviceMemoryFailsClearlyAndARetryOnABiggerDeviceWorks) {
  const std::vector<std::string> big = {
      "deploy", "big", PHOS_FAULT_FUNCTION, "--instances", "1", "--max-instances", "2", "--", "--mib", "24"};
  CommandResult deployed = PhosFn(big);
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  const std::string expected = fault_fn::ExpectedFingerprint(24);
  const Footprint baseline = Baseline("big");  // its forced restore fails as the ones below do
  for (const char* mode : {"phos", "no-order", "eager", "stop-the-world", "no-pool"}) {
    SCOPED_TRACE(mode);
    HttpResponse r = Invoke("big", "sum", {std::string("X-Phos-Restore-Mode: ") + mode});
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_NE(ErrorOf(r).find(std::string(mode) + " restore"), std::string::npos) << r.body;
    EXPECT_NE(ErrorOf(r).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << r.body;
    ExpectBackTo(baseline, "big");
    HttpResponse warm = Invoke("big", "sum");
    EXPECT_EQ(warm.status, 200) << warm.body;
    EXPECT_EQ(warm.body, expected);
  }
  // A cold boot runs the function from its start: its own allocation fails, and it says so.
  HttpResponse cold = Invoke("big", "sum", {"X-Phos-Restore-Mode: cold-boot"});
  EXPECT_EQ(cold.status, 502) << cold.body;
  EXPECT_NE(ErrorOf(cold).find("cudaErrorMemoryAllocation"), std::string::npos) << cold.body;
  ExpectBackTo(baseline, "big");
  ExpectStoreVerifies();

  phosd_env_ = {{"PHOS_SIMGPU_MEMORY", "80M"}};
  EXPECT_EQ(RestartPhosd(SIGTERM), 0);
  ASSERT_TRUE(Listed("big"));
  for (const char* mode : {"phos", "eager", "cold-boot"}) {
    HttpResponse r = Invoke("big", "sum", {std::string("X-Phos-Restore-Mode: ") + mode});
    EXPECT_EQ(r.status, 200) << mode << ": " << r.body;
    EXPECT_EQ(r.body, expected) << mode;
  }
  ExpectStoreVerifies();
}

// phosd's data directory on a 24 MiB tmpfs: a deploy whose snapshot needs 32 MiB fails with the
// store's error, leaves nothing half-committed, and deploys once the file system has room.
class DiskFullTest : public FaultsTest {
 protected:
  void PrepareDataDir() override {
    if (::mount("tmpfs", data_dir().c_str(), "tmpfs", 0, "size=24m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs on " << data_dir() << ": " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void ReleaseDataDir() override {
    if (mounted_) {
      EXPECT_EQ(::umount(data_dir().c_str()), 0) << std::strerror(errno);
    }
  }
  bool Resize(const char* size) {
    const std::string options = std::string("size=") + size;
    return ::mount("tmpfs", data_dir().c_str(), "tmpfs", MS_REMOUNT, options.c_str()) == 0;
  }
  bool mounted_ = false;
};

TEST_F(DiskFullTest, ADeployOnAFullDiskFailsCleanlyAndSucceedsOnceThereIsRoom) {
  const std::vector<std::string> deploy = {"deploy", "big", PHOS_FAULT_FUNCTION, "--", "--mib", "32"};
  const Footprint baseline = Measure();
  std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", endpoint(), "--token-file", data_dir() + "/admin.token"};
  argv.insert(argv.end(), deploy.begin(), deploy.end());
  Result<CommandOutput> full = RunCommand({.argv = argv, .stderr_to_stdout = true}, std::nullopt);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_FALSE(full->status.success());
  EXPECT_NE(full->output.find("HTTP 502"), std::string::npos) << full->output;
  EXPECT_NE(full->output.find("write segment"), std::string::npos) << full->output;
  EXPECT_NE(full->output.find("No space left on device"), std::string::npos) << full->output;
  EXPECT_NE(PhosdLog().find("deploy of 'big' failed; not registered"), std::string::npos) << "phosd logs it";
  EXPECT_FALSE(Listed("big"));
  ExpectStoreVerifies();
  EXPECT_EQ(::phos::testing::Run({PHOS_SNAPSHOT_TOOL, "--store", data_dir() + "/store", "ls"}).out, "");
  ExpectBackTo(baseline);

  ASSERT_TRUE(Resize("256m")) << std::strerror(errno);
  CommandResult deployed = PhosFn(deploy);
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  HttpResponse r = Invoke("big", "sum", {"X-Phos-Restore-Mode: phos"});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, fault_fn::ExpectedFingerprint(32));
  ExpectStoreVerifies();
}

// kill -9 with the snapshot's chunks written and synced but not yet indexed: after a restart the
// store verifies, and the function (registered when its deploy began) is deployed again and
// answers.
TEST_F(FaultsTest, KillInsideADeploysCommitLeavesTheStoreCleanAndTheFunctionDeployable) {
  RestartPausingAt("store-commit");
  std::thread deploy([argv = PhosFnCommand({"deploy", "ff", PHOS_FAULT_FUNCTION, "--", "--mib", std::to_string(kMib)})] {
    ::phos::testing::Run(argv);
  });
  KillAtFaultPoint("store-commit");
  deploy.join();
  ExpectStoreVerifies();
  if (!Listed("ff")) {
    CommandResult again = PhosFn({"deploy", "ff", PHOS_FAULT_FUNCTION, "--", "--mib", std::to_string(kMib)});
    ASSERT_EQ(again.exit_code, 0) << again.out;
  }
  ExpectCorrectAnswer("ff");
  ExpectCorrectAnswer("ff", "phos");
  ExpectStoreVerifies();
}

// kill -9 with a restore's first chunk on the device: the caller's connection drops; the restarted
// phosd answers in every restore mode from a store that verifies.
TEST_F(FaultsTest, KillInsideARestoreThenRestartAnswersCorrectly) {
  // No warm instance: the restart's redeploy restores nothing, the request's restore pauses.
  CommandResult deployed =
      PhosFn({"deploy", "ff", PHOS_FAULT_FUNCTION, "--instances", "0", "--", "--mib", std::to_string(kMib)});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  RestartPausingAt("restore-load");
  ASSERT_TRUE(WaitSettled("ff", 0));
  HttpResponse cut;
  std::thread invoke([&, at = endpoint()] { cut = InvokeAt(at, "ff", "sum", {"X-Phos-Restore-Mode: phos"}); });
  KillAtFaultPoint("restore-load");
  invoke.join();
  EXPECT_NE(cut.status, 200) << "answered although phosd was killed mid-restore";
  ExpectStoreVerifies();
  ASSERT_TRUE(Listed("ff"));
  for (const char* mode : {"auto", "phos", "eager", "stop-the-world"}) ExpectCorrectAnswer("ff", mode);
  ExpectStoreVerifies();
}

// kill -9 inside a garbage collection (the restart's redeploy replaced the snapshot; the old one's
// chunks are unindexed, their segment files not yet deleted): the next phosd finds a store that
// verifies and serves the function.
TEST_F(FaultsTest, KillInsideAGarbageCollectionLeavesTheStoreClean) {
  DeployFaultFn("ff");
  ASSERT_TRUE(WaitSettled("ff", 1));
  ExpectCorrectAnswer("ff");
  phosd_env_ = {{"PHOS_FAULT_PAUSE_AT", "store-gc"}};
  EXPECT_EQ(RestartPhosd(SIGTERM), 0);
  KillAtFaultPoint("store-gc");
  ExpectStoreVerifies();
  ASSERT_TRUE(Listed("ff"));
  ExpectCorrectAnswer("ff");
  ExpectCorrectAnswer("ff", "phos");
  // A removal collects the function's chunks: nothing of it stays.
  EXPECT_EQ(PhosFn({"rm", "ff"}).exit_code, 0);
  EXPECT_EQ(::phos::testing::Run({PHOS_SNAPSHOT_TOOL, "--store", data_dir() + "/store", "ls"}).out, "");
  ExpectStoreVerifies();
}

// kill -9 inside a checkpoint of a running instance (docs/design.md D10): with its template parked
// and nothing captured yet, and with its snapshot committed but the instance range not switched to
// it; and inside a soft recopy, with its first copies written to the store but not committed, and
// in its final stop. The next phosd finds a store that verifies, serves the function, and
// checkpoints it again.
TEST_F(FaultsTest, KillInsideACheckpointLeavesTheStoreCleanAndTheFunctionServing) {
  DeployFaultFn("ff");
  const std::pair<const char*, const char*> kills[] = {{"checkpoint-cpu-kept", "stop-the-world"},
                                                       {"checkpoint-captured", "stop-the-world"},
                                                       {"checkpoint-precopied", "soft-recopy"},
                                                       {"checkpoint-cpu-kept", "soft-recopy"}};
  for (const auto& [point, mode] : kills) {
    SCOPED_TRACE(std::string(point) + ", " + mode);
    RestartPausingAt(point);
    ASSERT_TRUE(WaitSettled("ff", 1));
    ExpectCorrectAnswer("ff");  // a GPU session, whose buffers a soft recopy copies
    std::thread checkpoint([argv = PhosFnCommand({"checkpoint", "ff", "--mode", mode})] { ::phos::testing::Run(argv); });
    KillAtFaultPoint(point);
    checkpoint.join();
    ExpectStoreVerifies();
    ASSERT_TRUE(Listed("ff"));
    ExpectCorrectAnswer("ff");
    ASSERT_TRUE(WaitSettled("ff", 1));
    CommandResult again = PhosFn({"checkpoint", "ff", "--mode", "soft-cow"});
    EXPECT_EQ(again.exit_code, 0) << again.out;
    ExpectCorrectAnswer("ff", "phos");
    ExpectStoreVerifies();
  }
}

}  // namespace
}  // namespace phos::testing
