// Deploy and restore end to end (issue 6): a real phosd on simgpu deploys functions into its
// snapshot store and serves them in every restore mode; it is killed mid-deploy and mid-restore,
// restarted, and given bad input. Each test runs its own phosd processes (their logs are read
// back), so it can kill them, restart them on the same data directory and choose their time scale.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mlp_model.h"
#include "../testing/wait_until.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kWeightSeed = 42;  // mlp's default --weight-seed
const char* const kRestoredModes[] = {"cold-boot", "stop-the-world", "eager", "no-pool", "no-order", "phos"};

// One phosd on `data_dir`, stdout and stderr appended to `log_path`, with PHOS_SIMGPU_TIME_SCALE
// set to `time_scale` (the profile comes from the test's environment).
class Phosd {
 public:
  Phosd(std::string data_dir, std::string log_path, std::string time_scale, std::vector<std::string> flags)
      : data_dir_(std::move(data_dir)),
        log_path_(std::move(log_path)),
        time_scale_(std::move(time_scale)),
        flags_(std::move(flags)) {}

  void Start() {
    std::string listen = "127.0.0.1:" + std::to_string(FreePort());
    endpoint_ = "http://" + listen;
    SpawnOptions options;
    options.argv = {PHOS_PHOSD, "--listen", listen, "--data-dir", data_dir_, "--gpu", "sim",
                    "--functions-dir", BuildBinDir()};
    options.argv.insert(options.argv.end(), flags_.begin(), flags_.end());
    options.env = {{"PHOS_SIMGPU_TIME_SCALE", time_scale_}};
    options.stdout_file = log_path_;
    options.stderr_to_stdout = true;
    Result<Subprocess> phosd = Subprocess::Spawn(options);
    ASSERT_TRUE(phosd.ok()) << phosd.status().ToString();
    process_.emplace(std::move(phosd).value());
    bool healthy = WaitUntil([&] {
      return Run({"/usr/bin/curl", "-sf", endpoint_ + "/healthz"}).exit_code == 0;
    });
    ASSERT_TRUE(healthy) << "phosd did not become healthy at " << endpoint_ << "; log " << log_path_;
  }

  // Sends `signal` and reaps phosd: its exit status as Run reports it (128 + signal when killed;
  // 128 + SIGKILL also when it had not ended kPhosdStopGrace after `signal`).
  int Stop(int signal) {
    if (!process_) return -1;
    Result<ExitStatus> how = process_->Stop(kPhosdStopGrace, signal);
    process_.reset();
    EXPECT_TRUE(how.ok()) << how.status().ToString();
    return how.ok() ? how->ShellCode() : -1;
  }

  CommandResult PhosFn(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", endpoint_, "--token-file",
                                     data_dir_ + "/admin.token"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv);
  }

  HttpResponse Invoke(const std::string& function, const std::string& body,
                      const std::string& mode = "") const {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-i", "-X", "POST", "--data-binary", body};
    if (!mode.empty()) argv.insert(argv.end(), {"-H", "X-Phos-Restore-Mode: " + mode});
    argv.push_back(endpoint_ + "/v1/functions/" + function + "/invoke");
    return ParseCurl(Run(argv).out);
  }

  // GET /v1/functions; `function`'s entry (null when it is not listed).
  nlohmann::json Listed(const std::string& function) const {
    nlohmann::json j =
        nlohmann::json::parse(Run({"/usr/bin/curl", "-s", endpoint_ + "/v1/functions"}).out, nullptr, false);
    if (j.is_discarded() || !j.contains("functions")) return nullptr;
    for (const auto& f : j["functions"]) {
      if (f.value("name", "") == function) return f;
    }
    return nullptr;
  }

  // Waits until `function` has exactly `instances` instances, all idle (the extra instances of
  // forced restores have ended after --keep-alive-ms). False on timeout.
  bool WaitSettled(const std::string& function, int instances,
                   milliseconds timeout = ::phos::testing::kPatience) const {
    Clock::time_point deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      nlohmann::json f = Listed(function);
      if (f.is_object() && f.contains("state")) {
        const auto& s = f["state"];
        if (s.value("idle", -1) == instances && s.value("starting", -1) == 0 && s.value("busy", -1) == 0)
          return true;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }

  std::string Log() const {
    std::ifstream in(log_path_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string data_dir_;
  std::string log_path_;
  std::string time_scale_;
  std::vector<std::string> flags_;
  std::string endpoint_;
  std::optional<Subprocess> process_;  // killed and reaped when the Phosd is destroyed
};

class RestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-restore-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    data_dir_ = root_ + "/data";
  }
  void TearDown() override {
    phosd_.reset();
    if (!HasFailure()) {
      std::error_code ec;
      std::filesystem::remove_all(root_, ec);
    } else {
      std::printf("phosd logs kept in %s\n", root_.c_str());
    }
  }

  // A new phosd on the test's data directory (the previous one must have been stopped).
  Phosd& StartPhosd(const std::string& time_scale, std::vector<std::string> flags) {
    phosd_ = std::make_unique<Phosd>(data_dir_, root_ + "/phosd-" + std::to_string(++starts_) + ".log",
                                     time_scale, std::move(flags));
    phosd_->Start();
    return *phosd_;
  }

  CommandResult Snapshot(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {PHOS_SNAPSHOT_TOOL, "--store", data_dir_ + "/store"};
    argv.insert(argv.end(), args.begin(), args.end());
    return ::phos::testing::Run(argv);
  }

  // `phos-snapshot inspect FUNCTION [VERSION]`: each buffer's first-touch rank, by buffer index.
  std::vector<int> Ranks(const std::string& function, const std::string& version = "") const {
    std::vector<std::string> args = {"inspect", function};
    if (!version.empty()) args.push_back(version);
    CommandResult r = Snapshot(args);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    std::vector<int> ranks;
    static const std::regex kBuffer(R"(^\s*buffer\s+\d+\s+\S+\s+\d+ B\s+\d+ chunks\s+rank\s+(-?\d+))");
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (std::regex_search(line, m, kBuffer)) ranks.push_back(std::stoi(m[1]));
    }
    return ranks;
  }

  // Waits until no template or instance of a phosd on the test's data directory is left.
  void ExpectFunctionProcessesGone(milliseconds timeout) const {
    Clock::time_point deadline = Clock::now() + timeout;
    std::vector<pid_t> left = FunctionProcessesOf(data_dir_);
    while (!left.empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(50));
      left = FunctionProcessesOf(data_dir_);
    }
    std::string pids;
    for (pid_t p : left) pids += " " + std::to_string(p);
    EXPECT_TRUE(left.empty()) << "function processes of the killed phosd still alive after "
                              << timeout.count() << " ms:" << pids;
  }

  std::string root_;
  std::string data_dir_;
  std::unique_ptr<Phosd> phosd_;
  int starts_ = 0;
};

// ---- mlp: the reference and the invariants of stage headers ----

// An mlp response for input seed `seed` against the CPU reference (every output element).
void ExpectMlpMatchesReference(const std::string& body, const mlp::Shape& shape, uint64_t seed) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("output") && j.contains("argmax")) << body;
  std::vector<float> expected = mlp::Reference(kWeightSeed, shape, mlp::InputFromSeed(seed, shape));
  std::vector<float> output = j["output"].get<std::vector<float>>();
  ASSERT_EQ(output.size(), expected.size());
  for (size_t i = 0; i < output.size(); ++i) ASSERT_NEAR(output[i], expected[i], 1e-4) << "element " << i;
  int argmax = static_cast<int>(std::max_element(expected.begin(), expected.end()) - expected.begin());
  EXPECT_EQ(j["argmax"][0].get<int>(), argmax);
}

std::string MlpRequest(uint64_t seed) {
  return "{\"seed\": " + std::to_string(seed) + ", \"full\": true}";
}

// The stage headers of a request served by a new instance, in the order the stages must happen:
// the context is leased and the process resumed (in either order: the lease runs while the process
// is made) before the first launch, which comes before the first response byte. Stop-the-world
// copies everything before the CPU side resumes; the other restores load while it runs.
void ExpectStageHeaders(const HttpResponse& r, const std::string& mode, const mlp::Shape& shape) {
  SCOPED_TRACE("stage headers of " + mode);
  int64_t lease = r.Number("x-phos-stage-lease-us");
  int64_t resume = r.Number("x-phos-stage-cpu-resume-us");
  int64_t launch = r.Number("x-phos-stage-first-launch-us");
  int64_t byte = r.Number("x-phos-stage-first-byte-us");
  ASSERT_GE(lease, 0);
  ASSERT_GE(resume, 0);
  ASSERT_GE(launch, 0);
  ASSERT_GT(byte, 0);
  EXPECT_LE(lease, launch);
  EXPECT_LE(resume, launch);
  EXPECT_LE(launch, byte);
  // A context created for the instance (cold-boot, stop-the-world, no-pool) holds no module: each
  // is loaded before the first launch. A pooled one may keep the function's (no load at all).
  if (mode == "cold-boot" || mode == "stop-the-world" || mode == "no-pool") {
    EXPECT_GE(r.Number("x-phos-modules-loaded"), 1);
  } else {
    EXPECT_GE(r.Number("x-phos-modules-loaded"), 0);
  }
  if (mode == "cold-boot") {
    // Nothing is restored: no loader, no validation.
    EXPECT_FALSE(r.Has("x-phos-stage-resident-us"));
    EXPECT_FALSE(r.Has("x-phos-speculation-misses"));
    EXPECT_FALSE(r.Has("x-phos-loaded-bytes-at-first-byte"));
    return;
  }
  // mlp's answer reads every weight and bias: they were all on the device when it began, and they
  // are most of the snapshot (the rest: activations of a few KiB).
  const int64_t snapshot = r.Number("x-phos-snapshot-bytes");
  const int64_t loaded = r.Number("x-phos-loaded-bytes-at-first-byte");
  const auto model = static_cast<int64_t>(shape.model_bytes());
  EXPECT_GE(snapshot, model);
  EXPECT_LE(snapshot, model + (1 << 20));
  EXPECT_GE(loaded, model);
  EXPECT_LE(loaded, snapshot);
  if (mode == "stop-the-world" || mode == "eager") {
    EXPECT_EQ(loaded, snapshot);  // all of it before the process resumed
  }
  int64_t resident = r.Number("x-phos-stage-resident-us");
  ASSERT_GE(resident, 0);
  EXPECT_LE(lease, resident);
  if (mode == "stop-the-world" || mode == "eager") {
    EXPECT_LE(resident, resume);
  }
  // mlp's kernels and cuBLAS calls name every buffer they touch in their parameters.
  EXPECT_EQ(r.Number("x-phos-speculation-misses"), 0);
}

// 1 and 3 (without a sample): 20 requests give the warm instance's bytes in every restore mode and
// match the reference; the order is learned from the first invocation.
TEST_F(RestoreTest, MlpGivesTheWarmBytesInEveryRestoreMode) {
  const mlp::Shape shape = mlp::ShapeForSize(16, 4, 1);
  Phosd& phosd = StartPhosd("1", {"--keep-alive-ms", "100"});
  CommandResult deployed = phosd.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1",
                                         "--max-instances", "2", "--", "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_TRUE(phosd.WaitSettled("mlp", 1));
  std::vector<int> before = Ranks("mlp");
  ASSERT_FALSE(before.empty());
  EXPECT_TRUE(std::all_of(before.begin(), before.end(), [](int r) { return r < 0; }))
      << "ranks before any request";

  constexpr int kRequests = 20;
  std::vector<std::string> warm(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    HttpResponse r = phosd.Invoke("mlp", MlpRequest(1000 + i), "warm");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], "warm");
    EXPECT_TRUE(r.Has("x-phos-stage-first-byte-us"));
    EXPECT_FALSE(r.Has("x-phos-stage-lease-us")) << "a warm instance was not leased for this request";
    ExpectMlpMatchesReference(r.body, shape, 1000 + i);
    warm[i] = r.body;
    if (i == 0) {
      // The warm instance learned the order from its first request.
      std::vector<int> after = Ranks("mlp");
      EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](int r) { return r >= 0; }))
          << "ranks after a request";
    }
  }
  for (const char* mode : kRestoredModes) {
    for (int i = 0; i < kRequests; ++i) {
      SCOPED_TRACE(std::string(mode) + " request " + std::to_string(i));
      HttpResponse r = phosd.Invoke("mlp", MlpRequest(1000 + i), mode);
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.headers["x-phos-restore-mode"], mode);
      EXPECT_EQ(r.body, warm[i]);
      ExpectStageHeaders(r, mode, shape);
    }
  }
}

// Module loading off the restore path (docs/design.md D7): the pooled context the deploy's capture
// returned, and each instance after it, keeps the function's modules loaded, so a restore loads
// none before its first launch; a context created for the restore (no-pool) has to load them.
TEST_F(RestoreTest, RestoresFindTheFunctionsModulesLoadedInThePooledContext) {
  const mlp::Shape shape = mlp::ShapeForSize(4, 2, 1);
  // One context for sessions (phosd holds the other for its DRAM tier's pinned arena): every
  // restore leases the one the capture and the instances before it returned, waiting for its scrub.
  Phosd& phosd = StartPhosd("1", {"--keep-alive-ms", "50", "--pool-min", "1", "--pool-max", "2"});
  CommandResult deployed = phosd.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "0",
                                         "--max-instances", "1", "--", "--size-mib", "4", "--layers", "2"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("restore " + std::to_string(i));
    ASSERT_TRUE(phosd.WaitSettled("mlp", 0));
    HttpResponse r = phosd.Invoke("mlp", MlpRequest(2000 + i), "phos");
    ASSERT_EQ(r.status, 200) << r.body;
    ExpectMlpMatchesReference(r.body, shape, 2000 + i);
    ExpectStageHeaders(r, "phos", shape);
    EXPECT_EQ(r.Number("x-phos-modules-loaded"), 0);
  }
  ASSERT_TRUE(phosd.WaitSettled("mlp", 0));
  HttpResponse fresh = phosd.Invoke("mlp", MlpRequest(2003), "no-pool");
  ASSERT_EQ(fresh.status, 200) << fresh.body;
  ExpectMlpMatchesReference(fresh.body, shape, 2003);
  EXPECT_GE(fresh.Number("x-phos-modules-loaded"), 1);
}

// phosd --dram-mib 0: no DRAM tier, so every restore reads its chunks from the store's disk, and
// still answers what the warm instance answers.
TEST_F(RestoreTest, WithoutADramTierRestoresReadTheStore) {
  const mlp::Shape shape = mlp::ShapeForSize(4, 2, 1);
  Phosd& phosd = StartPhosd("1", {"--keep-alive-ms", "100", "--dram-mib", "0"});
  CommandResult deployed = phosd.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--max-instances",
                                         "2", "--", "--size-mib", "4", "--layers", "2"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  for (const char* mode : {"phos", "eager"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(phosd.WaitSettled("mlp", 1));
    HttpResponse r = phosd.Invoke("mlp", MlpRequest(3000), mode);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], mode);
    ExpectMlpMatchesReference(r.body, shape, 3000);
  }
  EXPECT_NE(phosd.Log().find("no DRAM tier"), std::string::npos) << "the log says restores read the store";
}

// 5: a function deployed before a clean restart is deployed again and served after it.
TEST_F(RestoreTest, DeployedFunctionIsServedAfterACleanRestart) {
  const mlp::Shape shape = mlp::ShapeForSize(16, 4, 1);
  {
    Phosd& phosd = StartPhosd("1", {});
    CommandResult deployed =
        phosd.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--", "--size-mib", "16", "--layers", "4"});
    ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
    HttpResponse r = phosd.Invoke("mlp", MlpRequest(5));
    ASSERT_EQ(r.status, 200) << r.body;
    ExpectMlpMatchesReference(r.body, shape, 5);
    EXPECT_FALSE(FunctionProcessesOf(data_dir_).empty()) << "the function's processes are not found";
    EXPECT_EQ(phosd.Stop(SIGTERM), 0) << "phosd did not exit cleanly on SIGTERM";
  }
  ExpectFunctionProcessesGone(::phos::testing::kPatience);
  Phosd& phosd = StartPhosd("1", {});
  ASSERT_TRUE(phosd.Listed("mlp").is_object()) << "mlp is not listed after the restart";
  for (const char* mode : {"auto", "phos"}) {
    HttpResponse r = phosd.Invoke("mlp", MlpRequest(6), mode);
    ASSERT_EQ(r.status, 200) << mode << ": " << r.body;
    ExpectMlpMatchesReference(r.body, shape, 6);
  }
  Ranks("mlp");  // a snapshot exists again
  EXPECT_EQ(Snapshot({"verify"}).exit_code, 0);
  EXPECT_EQ(phosd.Stop(SIGTERM), 0);
}

// 4: kill -9 during deploys of a 64 MiB mlp at several points: no partial snapshot is left, and a
// restarted phosd deploys the function (again, or for the first time) and serves it correctly. At
// time scale 1 such a deploy takes ~700 ms on 2 cores: the function initialises for ~200 ms, the
// capture writes for ~300 ms, the DRAM tier is filled, then the warm instance is restored; the
// delays fall in each of these.
TEST_F(RestoreTest, KillDuringDeployLeavesNoPartialSnapshot) {
  const mlp::Shape shape = mlp::ShapeForSize(64, 4, 1);
  for (int delay_ms : {150, 300, 400, 500, 700, 1000}) {
    SCOPED_TRACE("killed " + std::to_string(delay_ms) + " ms into the deploy");
    std::error_code ec;
    std::filesystem::remove_all(data_dir_, ec);
    Phosd& phosd = StartPhosd("1", {});
    std::thread deploy([&phosd] {
      phosd.PhosFn({"deploy", "big", PHOS_MLP_FUNCTION, "--", "--size-mib", "64", "--layers", "4"});
    });
    std::this_thread::sleep_for(milliseconds(delay_ms));
    EXPECT_EQ(phosd.Stop(SIGKILL), 128 + SIGKILL);
    deploy.join();
    ExpectFunctionProcessesGone(::phos::testing::kPatience);

    CommandResult verify = Snapshot({"verify"});
    EXPECT_EQ(verify.exit_code, 0) << verify.out;
    EXPECT_EQ(verify.out.find("BAD"), std::string::npos) << verify.out;

    Phosd& again = StartPhosd("1", {});
    if (!again.Listed("big").is_object()) {
      // Killed before the function was registered: deploying it now must work.
      CommandResult deployed =
          again.PhosFn({"deploy", "big", PHOS_MLP_FUNCTION, "--", "--size-mib", "64", "--layers", "4"});
      ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
    }
    HttpResponse r = again.Invoke("big", MlpRequest(delay_ms));
    ASSERT_EQ(r.status, 200) << r.body;
    ExpectMlpMatchesReference(r.body, shape, delay_ms);
    verify = Snapshot({"verify"});
    EXPECT_EQ(verify.exit_code, 0) << verify.out;
    EXPECT_EQ(again.Stop(SIGTERM), 0);
  }
}

// ---- indirect_fn: reads through a pointer table the speculation cannot see ----

// 16 data buffers of 4 MB: at time scale 40 on the ci profile, loading them takes some 250-700 ms
// of wall time (25-70 ms measured at scale 4, the load being modelled device time), while a
// restored instance's first launch, host work, comes 20-100 ms after its lease. The sample request
// touches buffer 0 only, so the loader brings the last data buffer in among the last.
constexpr int kBuffers = 16;
constexpr int kElements = 1000000;
const char* const kIndirectScale = "40";

// indirect_fn's answer for "J COUNT": buffer j element k holds j * 1000 + k.
std::string IndirectAnswer(int j, int count) {
  double sum = static_cast<double>(count) * j * 1000 + static_cast<double>(count) * (count - 1) / 2;
  char buf[256];
  std::snprintf(buf, sizeof buf, "sum %.1f first", sum);
  std::string out = buf;
  for (int k = 0; k < count && k < 4; ++k) {
    std::snprintf(buf, sizeof buf, " %.1f", static_cast<double>(j * 1000 + k));
    out += buf;
  }
  return out;
}

class IndirectRestoreTest : public RestoreTest {
 protected:
  Phosd& DeployIndirect() {
    Phosd& phosd = StartPhosd(kIndirectScale, {"--keep-alive-ms", "100"});
    CommandResult r = phosd.PhosFn({"deploy", "indirect", PHOS_INDIRECT_FUNCTION, "--instances", "1",
                                    "--max-instances", "2", "--sample", "0 1", "--", "--buffers",
                                    std::to_string(kBuffers), "--elements", std::to_string(kElements)});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return phosd;
  }
};

// 2 and 3 (with a sample): the sample's first touches are recorded at deploy; the first request on
// a phos-restored instance reads the last data buffer before it is loaded, validation catches it
// and the answer is still right.
TEST_F(IndirectRestoreTest, ValidationCatchesAnIndirectReadOfAnUnloadedBuffer) {
  Phosd& phosd = DeployIndirect();
  ASSERT_FALSE(HasFailure());
  // Buffers: data 0..15, the pointer table (16), the output (17). The sample's gather names the
  // table and the output in its parameters; the last data buffer it does not touch at all.
  std::vector<int> ranks = Ranks("indirect");
  ASSERT_EQ(ranks.size(), static_cast<size_t>(kBuffers + 2));
  EXPECT_GE(ranks[kBuffers], 0) << "the table's rank";
  EXPECT_GE(ranks[kBuffers + 1], 0) << "the output's rank";
  EXPECT_LT(ranks[kBuffers - 1], 0) << "the last data buffer's rank";

  const std::string request = std::to_string(kBuffers - 1) + " " + std::to_string(kElements);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_TRUE(phosd.WaitSettled("indirect", 1));
    HttpResponse r = phosd.Invoke("indirect", request, "phos");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["x-phos-restore-mode"], "phos");
    EXPECT_EQ(r.body, IndirectAnswer(kBuffers - 1, kElements));
    EXPECT_GE(r.Number("x-phos-speculation-misses"), 1);
  }
  // The miss is logged as a warning of the restore subsystem naming the kernel.
  static const std::regex kMiss(R"(\[warning\] \[restore\] .*speculation miss: \S*gather)");
  EXPECT_TRUE(std::regex_search(phosd.Log(), kMiss))
      << "no speculation-miss warning naming gather in the log";
  // A warm request afterwards is answered without any check.
  HttpResponse warm = phosd.Invoke("indirect", "3 10", "warm");
  ASSERT_EQ(warm.status, 200);
  EXPECT_EQ(warm.body, IndirectAnswer(3, 10));
  // The misses are counted in the metrics too, with the invocations by mode.
  CommandResult metrics = ::phos::testing::Run({"/usr/bin/curl", "-s", phosd.endpoint() + "/metrics"});
  std::smatch m;
  static const std::regex kMisses(R"(phos_speculation_misses_total (\d+))");
  ASSERT_TRUE(std::regex_search(metrics.out, m, kMisses)) << metrics.out;
  EXPECT_GE(std::stoi(m[1]), 3);
  static const std::regex kPhos(R"(phos_invocations_total\{mode="phos"\} (\d+))");
  ASSERT_TRUE(std::regex_search(metrics.out, m, kPhos)) << metrics.out;
  EXPECT_GE(std::stoi(m[1]), 3);
  EXPECT_NE(metrics.out.find("phos_invocation_stage_seconds_sum{mode=\"phos\",stage=\"first-byte\"}"), std::string::npos);
}

// 4: kill -9 while a phos restore is still loading; the restarted phosd answers correctly, and the
// killed one's template and instances do not outlive it.
TEST_F(IndirectRestoreTest, KillDuringRestoreThenRestartServesCorrectly) {
  Phosd& phosd = DeployIndirect();
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(phosd.WaitSettled("indirect", 1));
  const std::string request = std::to_string(kBuffers - 1) + " 100";
  auto loaders = [&phosd] {
    static const std::regex kLoading(R"(\[restore\] .*indirect v\d+.*: loading \d+ buffers)");
    std::string log = phosd.Log();
    return std::distance(std::sregex_iterator(log.begin(), log.end(), kLoading), std::sregex_iterator());
  };
  const auto loaders_before = loaders();
  HttpResponse answer;
  std::thread invoke([&] { answer = phosd.Invoke("indirect", request, "phos"); });
  // Killed once the forced restore's loader has started, well before its 250-700 ms load ends.
  Clock::time_point deadline = Clock::now() + milliseconds(10000);
  while (loaders() == loaders_before && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_GT(loaders(), loaders_before) << "the phos restore did not start";
  // At once: the restore's preparation (modules included) and the fork take a few ms only.
  EXPECT_EQ(phosd.Stop(SIGKILL), 128 + SIGKILL);
  invoke.join();
  EXPECT_NE(answer.status, 200) << "answered before the kill: the kill did not land mid-restore";
  ExpectFunctionProcessesGone(::phos::testing::kPatience);
  EXPECT_EQ(Snapshot({"verify"}).exit_code, 0);

  Phosd& again = StartPhosd(kIndirectScale, {"--keep-alive-ms", "100"});
  for (const char* mode : {"auto", "phos"}) {
    HttpResponse r = again.Invoke("indirect", request, mode);
    ASSERT_EQ(r.status, 200) << mode << ": " << r.body;
    EXPECT_EQ(r.body, IndirectAnswer(kBuffers - 1, 100));
  }
  EXPECT_EQ(again.Stop(SIGTERM), 0);
}

// ---- 6: bad input ----

// The CRIU backend is used only where `criu check` passes: elsewhere phosd refuses to start with it,
// saying why (Debian's criu 3.17 cannot parse the vDSO of kernels >= 6.13).
TEST_F(RestoreTest, CriuCpuStateIsRefusedWhereCriuCheckFails) {
  SpawnOptions options;
  options.argv = {PHOS_PHOSD, "--listen", "127.0.0.1:0", "--data-dir", data_dir_, "--gpu", "sim"};
  options.argv.insert(options.argv.end(), {"--cpu-state", "criu"});
  options.stderr_to_stdout = true;
  Result<CommandOutput> r = RunCommand(options, milliseconds(10000));
  if (r.status().code() == StatusCode::kTimeout)
    GTEST_SKIP() << "criu check passes here: phosd started with --cpu-state criu";
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status.exit_code, 1) << r->output;
  EXPECT_NE(r->output.find("criu check"), std::string::npos) << r->output;
  const std::string& out = r->output;
  std::printf("phosd --cpu-state criu refused here: %s\n",
              out.substr(out.rfind("[error]") == std::string::npos ? 0 : out.rfind("[error]")).c_str());
}

// SIGTERM while a request is in flight: the caller gets phosd's 503, not a dropped connection,
// and phosd exits cleanly.
TEST_F(RestoreTest, InFlightInvocationIsAnsweredWhenPhosdStops) {
  Phosd& phosd = StartPhosd("1", {});
  CommandResult deployed = phosd.PhosFn({"deploy", "probe", PHOS_PROBE_FN});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  ASSERT_TRUE(phosd.WaitSettled("probe", 1));
  HttpResponse in_flight;
  std::thread caller([&] { in_flight = phosd.Invoke("probe", "sleep:5000"); });
  // Stopped while the instance is busy with the request (not before curl has sent it).
  bool busy = WaitUntil([&] {
    nlohmann::json f = phosd.Listed("probe");
    return f.is_object() && f.contains("state") && f["state"].value("busy", -1) == 1;
  });
  EXPECT_TRUE(busy) << "the request never reached the instance";
  EXPECT_EQ(phosd.Stop(SIGTERM), 0);
  caller.join();
  EXPECT_EQ(in_flight.status, 503) << in_flight.body;
  EXPECT_NE(in_flight.body.find("shutting down"), std::string::npos) << in_flight.body;
}

TEST_F(RestoreTest, UnknownRestoreModeIsABadRequest) {
  Phosd& phosd = StartPhosd("1", {});
  CommandResult deployed =
      phosd.PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--", "--size-mib", "4", "--layers", "2"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out;
  HttpResponse r = phosd.Invoke("mlp", MlpRequest(1), "fastest");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("X-Phos-Restore-Mode"), std::string::npos) << r.body;
  // phos-fn refuses it before sending anything.
  EXPECT_NE(phosd.PhosFn({"invoke", "mlp", "--data", MlpRequest(1), "--restore-mode", "fastest"}).exit_code,
            0);
  // The function keeps serving.
  HttpResponse good = phosd.Invoke("mlp", MlpRequest(1), "phos");
  EXPECT_EQ(good.status, 200) << good.body;
  EXPECT_EQ(phosd.Stop(SIGTERM), 0);
}

TEST_F(RestoreTest, DeployOfAFunctionThatExitsBeforeItsEntryPointFails) {
  Phosd& phosd = StartPhosd("1", {});
  // Out of --buffers' range: indirect_fn exits from its argument parsing, before any CUDA call.
  CommandResult early = phosd.PhosFn({"deploy", "early", PHOS_INDIRECT_FUNCTION, "--", "--buffers", "0"});
  EXPECT_NE(early.exit_code, 0) << early.out;
  EXPECT_FALSE(phosd.Listed("early").is_object()) << "a function that failed to deploy is listed";
  // /bin/false (uploaded: it is in no functions directory) never reaches an entry point either.
  CommandResult never = phosd.PhosFn({"deploy", "never", "/bin/false", "--upload"});
  EXPECT_NE(never.exit_code, 0) << never.out;
  EXPECT_FALSE(phosd.Listed("never").is_object()) << "a function that failed to deploy is listed";
  // Neither left a snapshot, and neither comes back after a restart.
  EXPECT_EQ(Snapshot({"ls"}).out, "");
  EXPECT_EQ(phosd.Stop(SIGTERM), 0);
  Phosd& again = StartPhosd("1", {});
  EXPECT_FALSE(again.Listed("early").is_object());
  EXPECT_FALSE(again.Listed("never").is_object());
  EXPECT_EQ(again.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace phos::testing
