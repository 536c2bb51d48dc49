// The instance manager with real function processes (the probe function).
#include "phos/runtime/instance_manager.h"

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "../testing/wait_until.h"

namespace phos::runtime {
namespace {

using namespace std::chrono_literals;
using Kind = InvokeOutcome::Kind;

class FakeSessions : public GpuSessions {
 public:
  std::string IssueToken(int gpus, const std::string& /*function*/) override {
    std::lock_guard lock(mu_);
    last_gpus_ = gpus;
    std::string token = "token" + std::to_string(++issued_);
    open_.insert(token);
    return token;
  }
  void EndSession(const std::string& token) override {
    std::lock_guard lock(mu_);
    open_.erase(token);
  }
  std::string SocketPath() const override { return "/tmp/fake-gpu.sock"; }
  // A node of 8 devices unless a test says otherwise.
  int DeviceCount() const override { return device_count_; }
  void set_device_count(int count) { device_count_ = count; }
  size_t open() {
    std::lock_guard lock(mu_);
    return open_.size();
  }
  int last_gpus() {
    std::lock_guard lock(mu_);
    return last_gpus_;
  }

 private:
  std::mutex mu_;
  int issued_ = 0;
  int last_gpus_ = 0;
  std::atomic<int> device_count_{8};
  std::set<std::string> open_;
};

using ::phos::testing::WaitUntil;

class InstanceManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-instances-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    options_.data_dir = tmpl;
    options_.invoke_timeout = 10s;
    options_.restart_backoff = 50ms;
    options_.sessions = &sessions_;
  }
  void TearDown() override {
    manager_.reset();
    std::filesystem::remove_all(options_.data_dir);
  }

  void OpenManager() {
    auto m = InstanceManager::Open(options_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manager_ = std::move(m).value();
  }

  InvokeOutcome Invoke(const std::string& name, const std::string& request, std::chrono::milliseconds timeout = 0ms) {
    std::promise<InvokeOutcome> p;
    auto f = p.get_future();
    manager_->Invoke(name, request, timeout, [&p](InvokeOutcome o) { p.set_value(std::move(o)); });
    return f.get();
  }

  void Register(const std::string& name, int instances, std::vector<std::string> args = {}) {
    FunctionSpec spec{name, PHOS_PROBE_FN, std::move(args), {{"PROBE_VAR", "from-spec"}}, instances};
    ASSERT_TRUE(manager_->Register(spec).ok());
  }

  FakeSessions sessions_;
  InstanceManagerOptions options_;
  std::unique_ptr<InstanceManager> manager_;
};

TEST_F(InstanceManagerTest, InvokesAndPassesEnvironment) {
  OpenManager();
  Register("probe", 1);
  InvokeOutcome echo = Invoke("probe", "hello");
  ASSERT_EQ(echo.kind, Kind::kOk) << echo.error.ToString();
  EXPECT_EQ(echo.body, "hello");
  EXPECT_EQ(Invoke("probe", "env:PROBE_VAR").body, "from-spec");
  EXPECT_EQ(Invoke("probe", "env:PHOS_GPU_SOCKET").body, "/tmp/fake-gpu.sock");
  EXPECT_EQ(Invoke("probe", "env:PHOS_INSTANCE_TOKEN").body.rfind("token", 0), 0u);
  InvokeOutcome failed = Invoke("probe", "fail");
  EXPECT_EQ(failed.kind, Kind::kFunctionError);
  EXPECT_EQ(failed.error.code(), StatusCode::kInvalidArgument);
  // A log per instance, named by pid.
  std::string pid = Invoke("probe", "pid").body;
  EXPECT_TRUE(std::filesystem::exists(options_.data_dir + "/logs/probe-" + pid + ".log"));
}

TEST_F(InstanceManagerTest, SessionTokenIsForTheFunctionsGpus) {
  OpenManager();
  FunctionSpec spec{"wide", PHOS_PROBE_FN, {}, {}, 1};
  spec.gpus = 2;
  ASSERT_TRUE(manager_->Register(spec).ok());
  ASSERT_EQ(Invoke("wide", "hello").kind, Kind::kOk);
  EXPECT_EQ(sessions_.last_gpus(), 2);
  // More GPUs than the node has: refused by the node's device count, not by a constant.
  spec.name = "too-wide";
  spec.gpus = 9;
  Status refused = manager_->Register(spec);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("asks for 9 GPUs; this node has 8"), std::string::npos) << refused.message();
  sessions_.set_device_count(16);
  EXPECT_TRUE(manager_->Register(spec).ok());
  sessions_.set_device_count(2);
  spec.name = "wider-than-two";
  spec.gpus = 3;
  refused = manager_->Register(spec);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("asks for 3 GPUs; this node has 2"), std::string::npos) << refused.message();
}

TEST_F(InstanceManagerTest, UnknownFunctionAndDuplicateName) {
  OpenManager();
  EXPECT_EQ(Invoke("nope", "x").kind, Kind::kUnknownFunction);
  Register("probe", 1);
  FunctionSpec again{"probe", PHOS_PROBE_FN, {}, {}, 1};
  EXPECT_EQ(manager_->Register(again).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(manager_->Remove("nope").code(), StatusCode::kNotFound);
}

TEST_F(InstanceManagerTest, CrashIsDiscardedAndReplaced) {
  OpenManager();
  Register("probe", 1);
  std::string first_pid = Invoke("probe", "pid").body;
  InvokeOutcome crashed = Invoke("probe", "crash");
  EXPECT_EQ(crashed.kind, Kind::kInstanceLost);
  EXPECT_NE(crashed.error.message().find("signal 6"), std::string::npos) << crashed.error.message();
  InvokeOutcome next = Invoke("probe", "pid");
  ASSERT_EQ(next.kind, Kind::kOk);
  EXPECT_NE(next.body, first_pid);
}

TEST_F(InstanceManagerTest, TimeoutKillsInstanceAndEndsItsSession) {
  OpenManager();
  Register("probe", 1);
  std::string first_pid = Invoke("probe", "pid").body;
  auto start = std::chrono::steady_clock::now();
  InvokeOutcome hung = Invoke("probe", "hang", 200ms);
  EXPECT_EQ(hung.kind, Kind::kTimeout);
  EXPECT_NE(hung.error.message().find("did not answer before the deadline"), std::string::npos)
      << hung.error.message();
  // The hang never ends, so the answer came from the 200 ms deadline; the bound is a deadline for
  // a loaded host, not a measurement.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  InvokeOutcome next = Invoke("probe", "pid");
  ASSERT_EQ(next.kind, Kind::kOk);
  EXPECT_NE(next.body, first_pid);
  EXPECT_EQ(sessions_.open(), 1u);  // the replacement's only
}

TEST_F(InstanceManagerTest, ConcurrentInvocationsQueueOverTwoInstances) {
  OpenManager();
  Register("probe", 2);
  std::vector<std::future<InvokeOutcome>> futures;
  std::vector<std::shared_ptr<std::promise<InvokeOutcome>>> promises;
  for (int i = 0; i < 16; ++i) {
    auto p = std::make_shared<std::promise<InvokeOutcome>>();
    futures.push_back(p->get_future());
    manager_->Invoke("probe", "sleep:20", 0ms, [p](InvokeOutcome o) { p->set_value(std::move(o)); });
    promises.push_back(p);
  }
  for (auto& f : futures) EXPECT_EQ(f.get().body, "slept");
  std::vector<FunctionStatus> listed = manager_->List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].idle + listed[0].starting + listed[0].busy, 2);
}

TEST_F(InstanceManagerTest, QueuedInvocationTimesOutWhenNoInstanceStarts) {
  OpenManager();
  Register("broken", 1, {"--exit-at-start"});
  InvokeOutcome o = Invoke("broken", "x", 300ms);
  EXPECT_EQ(o.kind, Kind::kTimeout);
}

TEST_F(InstanceManagerTest, RegistryPersistsAcrossRestartAndRemove) {
  OpenManager();
  Register("probe", 1);
  manager_.reset();
  EXPECT_EQ(sessions_.open(), 0u);
  OpenManager();
  ASSERT_EQ(manager_->List().size(), 1u);
  EXPECT_EQ(Invoke("probe", "again").body, "again");
  ASSERT_TRUE(manager_->Remove("probe").ok());
  EXPECT_EQ(Invoke("probe", "x").kind, Kind::kUnknownFunction);
  manager_.reset();
  OpenManager();
  EXPECT_TRUE(manager_->List().empty());
}

// A removal conditional on what the caller saw of a function (a cluster's record deleted). By the
// name's registration: whatever it deployed, rolled back to or deleted since is removed with it,
// while a name removed and registered afresh is another registration and stays. By a deploy (what
// a caller's older note holds): the name is removed while it holds that deploy, serving or kept.
TEST_F(InstanceManagerTest, RemoveIfHeldRemovesOnlyWhatHoldsTheVersion) {
  OpenManager();
  // The serving version: its deploy, and the name's registration.
  auto seen = [&](const std::string& name) {
    Result<std::vector<VersionStatus>> versions = manager_->Versions(name);
    EXPECT_TRUE(versions.ok()) << versions.status().ToString();
    for (const VersionStatus& v : versions.ok() ? *versions : std::vector<VersionStatus>{}) {
      if (v.state == "serving") {
        return HeldFunction{.registered_at_ms = v.registered_at_ms,
                            .number = v.version.number,
                            .deployed_at_ms = v.version.deployed_at_ms};
      }
    }
    return HeldFunction{};
  };
  auto deploy_version = [&](const std::string& name) {
    std::promise<DeployOutcome> deployed;  // swapped in at once: no snapshots to deploy
    manager_->DeployVersion({name, PHOS_PROBE_FN, {}, {}, 0}, "", 0ms,
                            [&](DeployOutcome o) { deployed.set_value(std::move(o)); });
    ASSERT_TRUE(deployed.get_future().get().status.ok());
  };
  auto deploy_only = [](HeldFunction held) {
    held.registered_at_ms = 0;
    return held;
  };

  Register("probe", 0);
  const HeldFunction first = seen("probe");
  ASSERT_NE(first.registered_at_ms, 0);
  HeldFunction earlier = deploy_only(first);
  --earlier.deployed_at_ms;
  HeldFunction next = deploy_only(first);
  ++next.number;
  EXPECT_EQ(manager_->RemoveIfHeld("probe", earlier).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->RemoveIfHeld("probe", next).code(), StatusCode::kFailedPrecondition);
  // Version 2 serves; version 1 is kept.
  deploy_version("probe");
  HeldFunction other_registration = first;
  other_registration.registered_at_ms += 1;
  EXPECT_EQ(manager_->RemoveIfHeld("probe", other_registration).code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(manager_->List().size(), 1u);
  ASSERT_TRUE(manager_->RemoveIfHeld("probe", deploy_only(first)).ok());  // kept: held
  EXPECT_TRUE(manager_->List().empty());
  EXPECT_EQ(manager_->RemoveIfHeld("probe", first).code(), StatusCode::kNotFound);

  // A rollback to version 1 deploys it anew, and a deleted version is gone: neither holds the
  // deploy seen, both hold the registration.
  Register("rolled-back", 0);
  const HeldFunction rolled_back = seen("rolled-back");
  deploy_version("rolled-back");
  std::promise<DeployOutcome> back;
  manager_->Rollback("rolled-back", 1, [&](DeployOutcome o) { back.set_value(std::move(o)); });
  ASSERT_TRUE(back.get_future().get().status.ok());
  Register("deleted", 0);
  const HeldFunction deleted = seen("deleted");
  deploy_version("deleted");
  ASSERT_TRUE(manager_->DeleteVersion("deleted", 1).ok());
  for (const auto& [name, held] : {std::pair{"rolled-back", rolled_back}, std::pair{"deleted", deleted}}) {
    EXPECT_EQ(manager_->RemoveIfHeld(name, deploy_only(held)).code(), StatusCode::kFailedPrecondition)
        << name;
    EXPECT_TRUE(manager_->RemoveIfHeld(name, held).ok()) << name;
  }
  EXPECT_TRUE(manager_->List().empty());

  // Removed and registered afresh: another registration, spared.
  Register("afresh", 0);
  const HeldFunction before = seen("afresh");
  ASSERT_TRUE(manager_->Remove("afresh").ok());
  Register("afresh", 0);
  EXPECT_NE(seen("afresh").registered_at_ms, before.registered_at_ms);
  EXPECT_EQ(manager_->RemoveIfHeld("afresh", before).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager_->List().size(), 1u);
}

// Registrations and deploys made here are stamped apart, however quickly they follow each other:
// each identifies what it stamps (a rollback within the millisecond of its version's first deploy
// is another deploy).
TEST_F(InstanceManagerTest, NoTwoStampsAreEqual) {
  OpenManager();
  std::set<int64_t> stamps;
  size_t given = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "fn" + std::to_string(i);
    Register(name, 0);
    Result<std::vector<VersionStatus>> versions = manager_->Versions(name);
    ASSERT_TRUE(versions.ok()) << versions.status().ToString();
    for (const VersionStatus& v : *versions) {
      stamps.insert(v.registered_at_ms);
      stamps.insert(v.version.deployed_at_ms);
      given += 2;
    }
  }
  EXPECT_EQ(stamps.size(), given);
}

// A name's registration is what the manager kept: the same after a restart. One listed by a
// registry written before registrations were kept gets one when loaded, kept at once.
TEST_F(InstanceManagerTest, ARegistrationOutlivesARestart) {
  OpenManager();
  Register("probe", 0);
  auto registered = [&] {
    Result<std::vector<VersionStatus>> versions = manager_->Versions("probe");
    return versions.ok() && !versions->empty() ? versions->front().registered_at_ms : 0;
  };
  const int64_t at = registered();
  ASSERT_NE(at, 0);
  manager_.reset();
  OpenManager();
  EXPECT_EQ(registered(), at);
  manager_.reset();

  FunctionRegistry older;
  older.serving.push_back({.number = 1, .spec = {"probe", PHOS_PROBE_FN, {}, {}, 0}, .deployed_at_ms = 1000});
  ASSERT_TRUE(SaveFunctionRegistry(options_.data_dir + "/functions.json", older).ok());
  OpenManager();
  const int64_t given = registered();
  ASSERT_NE(given, 0);
  manager_.reset();
  OpenManager();
  EXPECT_EQ(registered(), given);
}

TEST_F(InstanceManagerTest, ShutdownFailsQueuedAndEndsAll) {
  OpenManager();
  Register("probe", 1);
  ASSERT_EQ(Invoke("probe", "x").kind, Kind::kOk);
  std::promise<InvokeOutcome> busy;
  manager_->Invoke("probe", "hang", 0ms, [&busy](InvokeOutcome o) { busy.set_value(std::move(o)); });
  // Shut down while the instance is busy with it, not while it is still queued.
  EXPECT_TRUE(WaitUntil([&] {
    std::vector<FunctionStatus> listed = manager_->List();
    return listed.size() == 1 && listed[0].busy == 1;
  })) << "the hanging invocation never reached its instance";
  manager_->Shutdown();
  EXPECT_EQ(busy.get_future().get().kind, Kind::kStopping);
  EXPECT_EQ(sessions_.open(), 0u);
  EXPECT_EQ(Invoke("probe", "x").kind, Kind::kStopping);
}

}  // namespace
}  // namespace phos::runtime
