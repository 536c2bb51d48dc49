// The instance manager's restores with real function processes (the probe function, parked as fork
// templates) over GPU sessions faked with snapshots: a spare instance range so that an ending
// instance's scrub never holds up a restore, scaling to zero, the deploy's sample outcome, the
// contexts it asks the pool for, and the waits each restored invocation reports.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "../testing/wait_until.h"
#include "phos/runtime/cpu_state.h"
#include "phos/runtime/instance_manager.h"

namespace phos::runtime {
namespace {

using namespace std::chrono_literals;
using ::phos::testing::WaitUntil;
using Kind = InvokeOutcome::Kind;

// Snapshots without a GPU: captures number versions, restores are tokens; ending a session (the
// scrub of its instance range) can be held by the test.
class SnapshotFake : public GpuSessions {
 public:
  std::string IssueToken(int, const std::string&) override { return NewToken(); }
  void EndSession(const std::string& token) override {
    std::unique_lock lock(mu_);
    ++ending_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_ends_; });
    --ending_;
    ++ended_;
    cv_.notify_all();
    (void)token;
  }
  std::string SocketPath() const override { return "/tmp/fake-gpu.sock"; }
  int DeviceCount() const override { return 1; }
  bool SupportsSnapshots() const override { return true; }
  Result<int> ClaimVaSlot() override {
    std::lock_guard lock(mu_);
    return next_slot_++;
  }
  void ReleaseVaSlot(int) override {}
  Result<uint64_t> Capture(const std::string&, const std::string&, const CaptureOptions&) override {
    std::lock_guard lock(mu_);
    return ++versions_;
  }
  Result<std::string> IssueRestoreToken(const RestoreRequest& r) override {
    if (r.version != 0) {  // not a deploy's session
      std::lock_guard lock(mu_);
      restored_slots_.push_back(r.va_slot);
    }
    return NewToken();
  }
  SessionTimeline Timeline(const std::string&) override {
    SessionTimeline t;
    t.restored = true;
    t.leased = SessionTimeline::Clock::now();
    t.pool_wait = 7ms;  // what the pool reported for the lease
    return t;
  }
  bool HasFirstTouch(const std::string&, uint64_t) override {
    std::lock_guard lock(mu_);
    return learned_;
  }
  bool SaveFirstTouch(const std::string&, const std::string&, const std::vector<uint64_t>&) override {
    std::lock_guard lock(mu_);
    learned_ = true;
    return true;
  }
  // The functions (versions' keys) whose every snapshot was dropped.
  void RetainOnly(const std::string& function, const std::vector<uint64_t>& keep) override {
    std::lock_guard lock(mu_);
    if (keep.empty()) dropped_.push_back(function);
  }
  std::vector<std::string> dropped() {
    std::lock_guard lock(mu_);
    return dropped_;
  }
  void SetContextDemand(size_t contexts) override {
    std::lock_guard lock(mu_);
    demands_.push_back(contexts);
  }
  // A pool that is still making contexts while StarveContexts(true): the wait lasts until then or
  // until `stopping` says so (looked at every 10 ms, as a pool's wait would). `timeout` is the
  // test's, an hour.
  bool WaitForContexts(std::chrono::milliseconds, const std::function<bool()>& stopping) override {
    std::unique_lock lock(mu_);
    ++context_waits_;
    cv_.notify_all();
    while (starve_contexts_) {
      lock.unlock();
      if (stopping && stopping()) return false;
      lock.lock();
      cv_.wait_for(lock, 10ms);
    }
    return true;
  }
  void StarveContexts(bool starve) {
    std::lock_guard lock(mu_);
    starve_contexts_ = starve;
    cv_.notify_all();
  }
  int context_waits() {
    std::lock_guard lock(mu_);
    return context_waits_;
  }

  void HoldEnds(bool hold) {
    std::lock_guard lock(mu_);
    hold_ends_ = hold;
    cv_.notify_all();
  }
  int ending() {
    std::lock_guard lock(mu_);
    return ending_;
  }
  int ended() {
    std::lock_guard lock(mu_);
    return ended_;
  }
  std::vector<int> restored_slots() {
    std::lock_guard lock(mu_);
    return restored_slots_;
  }
  std::vector<size_t> demands() {
    std::lock_guard lock(mu_);
    return demands_;
  }

 private:
  std::string NewToken() {
    std::lock_guard lock(mu_);
    return "token" + std::to_string(++issued_);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ends_ = false;
  int ending_ = 0;
  int ended_ = 0;
  int issued_ = 0;
  int next_slot_ = 0;
  uint64_t versions_ = 0;
  bool learned_ = false;
  bool starve_contexts_ = false;
  int context_waits_ = 0;
  std::vector<int> restored_slots_;
  std::vector<size_t> demands_;
  std::vector<std::string> dropped_;
};

class InstanceRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-instance-restore-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    options_.data_dir = tmpl;
    options_.invoke_timeout = 30s;
    options_.restart_backoff = 50ms;
    options_.keep_alive = 1h;  // extras end only when a test says so
    options_.sessions = &sessions_;
    auto backend = ForkTemplateBackend::Create({});
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(*backend);
    options_.cpu_state = backend_.get();
  }
  void TearDown() override {
    sessions_.HoldEnds(false);
    manager_.reset();
    backend_.reset();
    std::filesystem::remove_all(options_.data_dir);
  }

  void Open() {
    auto m = InstanceManager::Open(options_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manager_ = std::move(m).value();
  }

  DeployOutcome Deploy(int instances, int max_instances, const std::string& sample = "",
                       std::chrono::milliseconds sample_timeout = 0ms) {
    FunctionSpec spec{"probe", PHOS_PROBE_FN, {}, {}, instances};
    spec.max_instances = max_instances;
    std::promise<DeployOutcome> p;
    manager_->Deploy(spec, sample, sample_timeout, [&p](DeployOutcome o) { p.set_value(std::move(o)); });
    return p.get_future().get();
  }

  InvokeOutcome Invoke(const std::string& request, RestoreMode mode) {
    std::promise<InvokeOutcome> p;
    manager_->Invoke("probe", request, 0ms, mode, [&p](InvokeOutcome o) { p.set_value(std::move(o)); });
    return p.get_future().get();
  }

  FunctionStatus Status() {
    std::vector<FunctionStatus> listed = manager_->List();
    return listed.empty() ? FunctionStatus{} : listed[0];
  }

  static int64_t Wait(const InvokeOutcome& o, const std::string& name) {
    for (const auto& [wait, us] : o.waits) {
      if (wait == name) return us;
    }
    return -1;
  }

  SnapshotFake sessions_;
  std::unique_ptr<ForkTemplateBackend> backend_;
  InstanceManagerOptions options_;
  std::unique_ptr<InstanceManager> manager_;
};

TEST_F(InstanceRestoreTest, AFunctionGetsARangeForEachInstanceItMayRunAndASpare) {
  Open();
  DeployOutcome deployed = Deploy(1, 2);
  ASSERT_TRUE(deployed.status.ok()) << deployed.status.ToString();
  EXPECT_FALSE(deployed.sample_ran);
  // Three ranges claimed, one per capture; the pool was asked for all three while it deployed.
  std::vector<size_t> demands = sessions_.demands();
  EXPECT_NE(std::find(demands.begin(), demands.end(), 3u), demands.end());
  ASSERT_TRUE(WaitUntil([&] { return Status().idle == 1; }));
  // The warm instance holds one range: two are left for restores, and the pool is told so.
  EXPECT_TRUE(WaitUntil([&] { return !sessions_.demands().empty() && sessions_.demands().back() == 2; }));
}

// Shutdown joins the deploy's thread: a deploy waiting for a pool that takes its time (minutes on
// the a100 profile) must not hold phosd's stop up for its start timeout. Without the fix this test
// hangs until ctest's timeout.
TEST_F(InstanceRestoreTest, ShutdownDoesNotWaitForADeploysContexts) {
  options_.start_timeout = std::chrono::hours(1);
  Open();
  sessions_.StarveContexts(true);
  std::promise<DeployOutcome> p;
  FunctionSpec spec{"probe", PHOS_PROBE_FN, {}, {}, 1};
  manager_->Deploy(spec, "", 0ms, [&p](DeployOutcome o) { p.set_value(std::move(o)); });
  ASSERT_TRUE(WaitUntil([&] { return sessions_.context_waits() > 0; })) << "the deploy never waited for contexts";
  manager_->Shutdown();
  DeployOutcome outcome = p.get_future().get();
  EXPECT_TRUE(outcome.status.ok()) << outcome.status.ToString();  // deployed; its contexts were not ready
  EXPECT_FALSE(outcome.contexts_ready);
}

TEST_F(InstanceRestoreTest, EndingAnInstanceNeverHoldsUpAnotherRequestsRestore) {
  Open();
  ASSERT_TRUE(Deploy(1, 1).status.ok());  // one instance at a time, two ranges
  ASSERT_TRUE(WaitUntil([&] { return Status().idle == 1; }));
  const std::string warm_pid = Invoke("pid", RestoreMode::kWarm).body;
  const int ended_before = sessions_.ended();
  sessions_.HoldEnds(true);
  // A forced restore while the only instance allowed is idle: that one must make way, and its end
  // (the scrub of its range) cannot finish while held. The restore takes the spare range instead.
  InvokeOutcome restored = Invoke("pid", RestoreMode::kPhos);
  ASSERT_EQ(restored.kind, Kind::kOk) << restored.error.ToString();
  EXPECT_EQ(restored.mode, RestoreMode::kPhos);
  EXPECT_NE(restored.body, warm_pid);
  EXPECT_EQ(sessions_.ended(), ended_before) << "no session end could complete, yet the restore was served";
  // The evicted instance is really stuck in its scrub meanwhile, and is shown as ending.
  EXPECT_TRUE(WaitUntil([&] { return sessions_.ending() == 1; }));
  EXPECT_EQ(Status().ending, 1);
  std::vector<int> slots = sessions_.restored_slots();
  ASSERT_GE(slots.size(), 2u);
  EXPECT_NE(slots[slots.size() - 1], slots[slots.size() - 2]) << "the restore used the evicted instance's range";
  EXPECT_GE(Wait(restored, "range-wait"), 0);
  EXPECT_EQ(Wait(restored, "pool-wait"), 7000);  // the lease's wait, as the sessions reported it
  sessions_.HoldEnds(false);
  EXPECT_TRUE(WaitUntil([&] { return sessions_.ended() == ended_before + 1 && Status().ending == 0; }));
  // The restored instance serves on, warm.
  EXPECT_EQ(Invoke("pid", RestoreMode::kWarm).body, restored.body);
}

TEST_F(InstanceRestoreTest, AFunctionScaledToZeroIsRestoredForARequestAndEndsAfterItsKeepAlive) {
  options_.keep_alive = 50ms;
  Open();
  DeployOutcome deployed = Deploy(0, 0);
  ASSERT_TRUE(deployed.status.ok()) << deployed.status.ToString();
  FunctionStatus s = Status();
  EXPECT_EQ(s.starting + s.idle + s.busy, 0) << "no warm instance";
  InvokeOutcome first = Invoke("pid", RestoreMode::kAuto);
  ASSERT_EQ(first.kind, Kind::kOk) << first.error.ToString();
  EXPECT_EQ(first.mode, RestoreMode::kPhos);
  ASSERT_TRUE(WaitUntil([&] {
    FunctionStatus now = Status();
    return now.starting + now.idle + now.busy + now.ending == 0;
  })) << "the instance outlived its keep-alive";
  InvokeOutcome again = Invoke("pid", RestoreMode::kAuto);
  ASSERT_EQ(again.kind, Kind::kOk) << again.error.ToString();
  EXPECT_EQ(again.mode, RestoreMode::kPhos);
  EXPECT_NE(again.body, first.body);
}

TEST_F(InstanceRestoreTest, TheDeploySaysWhatBecameOfItsSample) {
  Open();
  DeployOutcome served = Deploy(1, 1, "hello");
  ASSERT_TRUE(served.status.ok()) << served.status.ToString();
  EXPECT_TRUE(served.sample_ran);
  EXPECT_TRUE(served.sample.ok()) << served.sample.ToString();
  EXPECT_TRUE(served.first_touch_learned);
  EXPECT_TRUE(served.contexts_ready);
  ASSERT_TRUE(manager_->Remove("probe").ok());

  // A sample that never answers: the deploy still succeeds, and says the sample timed out.
  DeployOutcome hung = Deploy(1, 1, "hang", 200ms);
  ASSERT_TRUE(hung.status.ok()) << hung.status.ToString();
  EXPECT_TRUE(hung.sample_ran);
  EXPECT_EQ(hung.sample.code(), StatusCode::kTimeout);
  EXPECT_NE(hung.sample.message().find("did not answer before the deadline"), std::string::npos)
      << hung.sample.message();
}

// Each instance's life as InstanceManagerOptions::on_event tells it: the warm one started from
// its range's snapshot, evicted for a request's restore, ended; the restored one ended with the
// function's removal.
TEST_F(InstanceRestoreTest, InstancesTellWhatBecomesOfThem) {
  // Shared with the callback, which the manager may call until the fixture destroys it.
  struct Told {
    std::mutex mu;
    std::vector<std::string> events;
  };
  auto state = std::make_shared<Told>();
  options_.on_event = [state](const InstanceEvent& e) {
    std::lock_guard lock(state->mu);
    state->events.push_back(fmt::format("{} {} v{} #{} {}", InstanceEventName(e.kind), e.function, e.version,
                                        e.instance, RestoreModeName(e.mode)));
  };
  auto told = [state] {
    std::lock_guard lock(state->mu);
    return state->events;
  };
  Open();
  ASSERT_TRUE(Deploy(1, 1).status.ok());
  ASSERT_TRUE(WaitUntil([&] { return Status().idle == 1; }));
  std::vector<InstanceStatus> warm = *manager_->Instances("probe");
  ASSERT_EQ(warm.size(), 1u);
  const std::string w = "probe v1 #" + std::to_string(warm[0].id);
  ASSERT_EQ(Invoke("pid", RestoreMode::kPhos).kind, Kind::kOk);
  std::vector<InstanceStatus> now = *manager_->Instances("probe");
  ASSERT_FALSE(now.empty());
  const std::string r = "probe v1 #" + std::to_string(now.back().id);
  ASSERT_TRUE(WaitUntil([&] { return told().size() == 4; })) << fmt::format("{}", fmt::join(told(), "; "));
  const std::vector<std::string> all = told();
  EXPECT_EQ(all[0], "restored " + w + " phos");  // the warm one: restored from its range's snapshot
  // The warm one's eviction and end, and the request's instance, are told from their own threads:
  // in any order between them, the warm one's evicted before its end.
  const std::vector<std::string> rest(all.begin() + 1, all.end());
  auto at = [&](const std::string& e) { return std::find(rest.begin(), rest.end(), e) - rest.begin(); };
  EXPECT_LT(at("evicted " + w + " phos"), at("ended " + w + " phos")) << fmt::format("{}", fmt::join(all, "; "));
  EXPECT_LT(at("ended " + w + " phos"), static_cast<long>(rest.size()));
  EXPECT_NE(std::find(rest.begin(), rest.end(), "restored " + r + " phos"), rest.end());
  ASSERT_TRUE(manager_->Remove("probe").ok());
  ASSERT_TRUE(WaitUntil([&] { return told().size() == 5; }));
  EXPECT_EQ(told()[4], "ended " + r + " phos");
}

// ---- versions (docs/design.md D18) ----

class InstanceVersionsTest : public InstanceRestoreTest {
 protected:
  static FunctionSpec Version(const std::string& value, const std::string& executable = PHOS_PROBE_FN) {
    return FunctionSpec{"probe", executable, {}, {{"V", value}}, 1};
  }
  DeployOutcome Await(const std::function<void(std::function<void(DeployOutcome)>)>& start) {
    std::promise<DeployOutcome> p;
    start([&p](DeployOutcome o) { p.set_value(std::move(o)); });
    return p.get_future().get();
  }
  DeployOutcome DeployFirst(const FunctionSpec& spec) {
    return Await([&](auto done) { manager_->Deploy(spec, "", 0ms, std::move(done)); });
  }
  DeployOutcome DeployNext(const FunctionSpec& spec) {
    return Await([&](auto done) { manager_->DeployVersion(spec, "", 0ms, std::move(done)); });
  }
  DeployOutcome RollBack(uint64_t version) {
    return Await([&](auto done) { manager_->Rollback("probe", version, std::move(done)); });
  }
  // "number:state" of each version, oldest first.
  std::vector<std::string> Versions() {
    auto listed = manager_->Versions("probe");
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    std::vector<std::string> out;
    for (const VersionStatus& v : listed.ok() ? *listed : std::vector<VersionStatus>{}) {
      out.push_back(std::to_string(v.version.number) + ":" + v.state);
    }
    return out;
  }
  // Deploys version "one" and holds its instance busy on a request answered once `release`
  // exists (the answer to `held`).
  void HoldVersionOneBusy(const std::string& release, std::promise<InvokeOutcome>* held) {
    Open();
    ASSERT_TRUE(DeployFirst(Version("one")).status.ok());
    ASSERT_TRUE(WaitUntil([&] { return Status().idle == 1; }));
    manager_->Invoke("probe", "pieces:" + release, 0ms, RestoreMode::kWarm,
                     [held](InvokeOutcome o) { held->set_value(std::move(o)); });
    ASSERT_TRUE(WaitUntil([&] { return Status().busy == 1; }));
  }
  using Strings = std::vector<std::string>;
};

TEST_F(InstanceVersionsTest, ANewVersionServesOnceDeployedAndRollingBackServesTheEarlierOneAgain) {
  Open();
  ASSERT_TRUE(DeployFirst(Version("one")).status.ok());
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "one");
  // Version 2 held before its entry point until the test lets it go.
  const std::string go = options_.data_dir + "/go";
  FunctionSpec held = Version("x");
  held.args = {"--wait-at-start", go};
  std::promise<DeployOutcome> deployed;
  manager_->DeployVersion(held, "", 0ms, [&deployed](DeployOutcome o) { deployed.set_value(std::move(o)); });
  EXPECT_EQ(Status().deploying_version, 2u);
  EXPECT_EQ(Versions(), (Strings{"1:serving", "2:deploying"}));
  // Refused while another version deploys: one replacement at a time. Version 1 serves meanwhile.
  DeployOutcome second = DeployNext(Version("two"));
  EXPECT_EQ(second.status.code(), StatusCode::kFailedPrecondition) << second.status.ToString();
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "one");
  std::ofstream(go).put('x');
  DeployOutcome x = deployed.get_future().get();
  ASSERT_TRUE(x.status.ok()) << x.status.ToString();
  EXPECT_EQ(x.version, 2u);
  EXPECT_EQ(Status().version, 2u);
  EXPECT_EQ(Status().deploying_version, 0u);
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "x");
  EXPECT_EQ(Versions(), (Strings{"1:kept", "2:serving"}));
  // The replaced version's warm instance ends, and with its last instance its snapshots go.
  EXPECT_TRUE(WaitUntil([&] { return sessions_.dropped() == std::vector<std::string>{"probe"}; }))
      << fmt::format("{}", fmt::join(sessions_.dropped(), ", "));

  DeployOutcome third = DeployNext(Version("three"));
  ASSERT_TRUE(third.status.ok()) << third.status.ToString();
  EXPECT_EQ(third.version, 3u);
  EXPECT_EQ(Invoke("env:V", RestoreMode::kPhos).body, "three");
  EXPECT_EQ(Status().spec.name, "probe");
  EXPECT_EQ(Versions(), (Strings{"1:kept", "2:kept", "3:serving"}));

  DeployOutcome back = RollBack(0);  // the newest older one
  ASSERT_TRUE(back.status.ok()) << back.status.ToString();
  EXPECT_EQ(back.version, 2u);
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "x");
  EXPECT_EQ(Versions(), (Strings{"1:kept", "2:serving", "3:kept"}));
  ASSERT_TRUE(RollBack(1).status.ok());
  EXPECT_EQ(Invoke("env:V", RestoreMode::kPhos).body, "one");
  EXPECT_EQ(RollBack(1).status.code(), StatusCode::kFailedPrecondition);  // serving already
  EXPECT_EQ(RollBack(0).status.code(), StatusCode::kFailedPrecondition);  // nothing older kept
  EXPECT_EQ(RollBack(9).status.code(), StatusCode::kNotFound);

  // A kept version can be deleted, the serving one cannot.
  EXPECT_EQ(manager_->DeleteVersion("probe", 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(manager_->DeleteVersion("probe", 2).ok());
  EXPECT_EQ(manager_->DeleteVersion("probe", 2).code(), StatusCode::kNotFound);
  EXPECT_EQ(Versions(), (Strings{"1:serving", "3:kept"}));

  // A restarted manager serves the same version and keeps the same ones; the next is 4.
  manager_.reset();
  Open();
  EXPECT_EQ(Versions(), (Strings{"1:serving", "3:kept"}));
  ASSERT_TRUE(WaitUntil([&] { return Status().idle == 1; }));
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "one");
  EXPECT_EQ(DeployNext(Version("four")).version, 4u);
  // Removing the function forgets its versions.
  ASSERT_TRUE(manager_->Remove("probe").ok());
  EXPECT_EQ(manager_->Versions("probe").status().code(), StatusCode::kNotFound);
}

// Past kept_versions the oldest is forgotten; removing a function while a version of it deploys
// answers that deploy and forgets every version.
TEST_F(InstanceVersionsTest, KeptVersionsAreBoundedAndRemovalEndsADeployUnderWay) {
  options_.kept_versions = 1;
  Open();
  ASSERT_TRUE(DeployFirst(Version("one")).status.ok());
  ASSERT_TRUE(DeployNext(Version("two")).status.ok());
  ASSERT_TRUE(DeployNext(Version("three")).status.ok());
  EXPECT_EQ(Versions(), (Strings{"2:kept", "3:serving"}));
  EXPECT_EQ(RollBack(1).status.code(), StatusCode::kNotFound);

  const std::string go = options_.data_dir + "/go";
  FunctionSpec held = Version("four");
  held.args = {"--wait-at-start", go};
  std::promise<DeployOutcome> deployed;
  manager_->DeployVersion(held, "", 0ms, [&deployed](DeployOutcome o) { deployed.set_value(std::move(o)); });
  EXPECT_EQ(Versions(), (Strings{"2:kept", "3:serving", "4:deploying"}));
  ASSERT_TRUE(manager_->Remove("probe").ok());
  std::ofstream(go).put('x');
  DeployOutcome outcome = deployed.get_future().get();
  EXPECT_FALSE(outcome.status.ok());
  EXPECT_EQ(manager_->Versions("probe").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(manager_->List().empty());
  // The name is free again: a new function of it starts at version 1.
  EXPECT_EQ(DeployFirst(Version("again")).version, 1u);
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "again");
}

// A removal conditional on a deploy (InstanceManager::RemoveIfHeld without the name's registration)
// finds a version still deploying: the name is removed with it, and its deploy answered.
TEST_F(InstanceVersionsTest, RemoveIfHeldFindsAVersionStillDeploying) {
  Open();
  ASSERT_TRUE(DeployFirst(Version("one")).status.ok());
  const std::string go = options_.data_dir + "/go";
  FunctionSpec held = Version("two");
  held.args = {"--wait-at-start", go};
  std::promise<DeployOutcome> deployed;
  manager_->DeployVersion(held, "", 0ms, [&deployed](DeployOutcome o) { deployed.set_value(std::move(o)); });
  auto listed = manager_->Versions("probe");
  ASSERT_TRUE(listed.ok() && !listed->empty()) << listed.status().ToString();
  ASSERT_EQ(listed->back().state, "deploying");
  const HeldFunction deploying{.number = listed->back().version.number,
                               .deployed_at_ms = listed->back().version.deployed_at_ms};
  HeldFunction earlier = deploying;
  --earlier.deployed_at_ms;
  EXPECT_EQ(manager_->RemoveIfHeld("probe", earlier).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(manager_->RemoveIfHeld("probe", deploying).ok());
  std::ofstream(go).put('x');
  EXPECT_FALSE(deployed.get_future().get().status.ok());
  EXPECT_TRUE(manager_->List().empty());
}

TEST_F(InstanceVersionsTest, AVersionThatFailsToDeployLeavesTheServingOneAsItWas) {
  Open();
  ASSERT_TRUE(DeployFirst(Version("one")).status.ok());
  FunctionSpec broken = Version("two");
  broken.args = {"--exit-at-start"};
  DeployOutcome failed = DeployNext(broken);
  EXPECT_FALSE(failed.status.ok());
  EXPECT_EQ(failed.version, 0u);
  EXPECT_EQ(Invoke("env:V", RestoreMode::kPhos).body, "one");
  EXPECT_EQ(Versions(), (Strings{"1:serving"}));
  EXPECT_EQ(Status().version, 1u);
  // Versions of what is not registered, or of a job, are refused.
  FunctionSpec other = Version("x");
  other.name = "other";
  EXPECT_EQ(DeployNext(other).status.code(), StatusCode::kNotFound);
  // A version's key names nothing from outside.
  std::promise<InvokeOutcome> p;
  manager_->Invoke("probe@2", "env:V", 0ms, [&p](InvokeOutcome o) { p.set_value(std::move(o)); });
  EXPECT_EQ(p.get_future().get().kind, Kind::kUnknownFunction);
  EXPECT_EQ(manager_->Instances("probe@1").status().code(), StatusCode::kNotFound);
}

// A request the replaced version is serving is answered by it; what comes after goes to the new one.
TEST_F(InstanceVersionsTest, TheReplacedVersionFinishesWhatItServes) {
  const std::string release = options_.data_dir + "/release";
  std::promise<InvokeOutcome> held;
  ASSERT_NO_FATAL_FAILURE(HoldVersionOneBusy(release, &held));
  ASSERT_TRUE(DeployNext(Version("two")).status.ok());
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "two");
  std::ofstream(release).put('x');
  InvokeOutcome answered = held.get_future().get();
  ASSERT_EQ(answered.kind, Kind::kOk) << answered.error.ToString();
  EXPECT_EQ(answered.body, "first\nsecond\n");
}

// A restore for a request waiting for room in the replaced version (its one instance busy) is not
// failed by the swap: the new version serves that request.
TEST_F(InstanceVersionsTest, ARestoreWaitingWhenItsVersionIsReplacedIsServedByTheNewOne) {
  const std::string release = options_.data_dir + "/release";
  std::promise<InvokeOutcome> held;
  ASSERT_NO_FATAL_FAILURE(HoldVersionOneBusy(release, &held));
  std::promise<InvokeOutcome> waiting;
  manager_->Invoke("probe", "env:V", 0ms, RestoreMode::kPhos,
                   [&waiting](InvokeOutcome o) { waiting.set_value(std::move(o)); });
  ASSERT_TRUE(WaitUntil([&] { return Status().starting == 1; })) << "the restore does not wait for room";
  ASSERT_TRUE(DeployNext(Version("two")).status.ok());
  InvokeOutcome served = waiting.get_future().get();
  ASSERT_EQ(served.kind, Kind::kOk) << served.error.ToString();
  EXPECT_EQ(served.body, "two");
  std::ofstream(release).put('x');
  EXPECT_EQ(held.get_future().get().body, "first\nsecond\n");
}

// A rollback runs the program its version ran, or is refused.
TEST_F(InstanceVersionsTest, ARollbackWhoseExecutableChangedIsRefused) {
  Open();
  const std::string copy = options_.data_dir + "/probe-copy";
  std::filesystem::copy_file(PHOS_PROBE_FN, copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  ASSERT_TRUE(DeployFirst(Version("one", copy)).status.ok());
  ASSERT_TRUE(DeployNext(Version("two")).status.ok());
  // Rebuilt in place, as a linker does it: a new file renamed over the old (a running program's
  // file cannot be written).
  std::filesystem::copy_file(PHOS_PROBE_FN, copy + ".new");
  std::ofstream(copy + ".new", std::ios::app).put('\0');
  std::filesystem::rename(copy + ".new", copy);
  DeployOutcome refused = RollBack(1);
  EXPECT_EQ(refused.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status.message().find("SHA-256"), std::string::npos) << refused.status.message();
  EXPECT_EQ(Invoke("env:V", RestoreMode::kAuto).body, "two");
}

}  // namespace
}  // namespace phos::runtime
