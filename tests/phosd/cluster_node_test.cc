// The cluster node's own bookkeeping, its steps driven one at a time against a real instance
// manager (functions of no instance: nothing runs) and, where a record is read, a real etcd (those
// tests skip, saying why, without one). A race's two sides are interleaved at the node's test
// points, so each runs the same way every time.
#include "cluster_node.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../testing/etcd.h"

namespace phos::phosd {

class ClusterNodeTestPeer {
 public:
  using TestPoint = ClusterNode::TestPoint;
  static std::unique_ptr<ClusterNode> Make(ClusterOptions options, cluster::Etcd etcd,
                                           runtime::InstanceManager* manager,
                                           const Executables* executables) {
    return std::unique_ptr<ClusterNode>(new ClusterNode(std::move(options), std::move(etcd), manager,
                                                        /*store=*/nullptr, executables,
                                                        objstore::S3Client(objstore::S3Options{}),
                                                        /*uploader=*/nullptr));
  }
  static void SetHook(ClusterNode& node, std::function<void(TestPoint, const std::string&)> hook) {
    node.test_hook_ = std::move(hook);
  }
  static void NoteRecorded(ClusterNode& node, const std::string& name, bool recorded) {
    if (recorded) {
      node.NoteRecorded(name);
    } else {
      node.NoteUnrecorded(name);
    }
  }
  // A removal of what an older node's file noted: a deploy, without its registration.
  static void RemoveHere(ClusterNode& node, const std::string& name, uint64_t number,
                         int64_t deployed_at_ms) {
    node.RemoveHere(name, {.number = number, .deployed_at_ms = deployed_at_ms}, "in the test");
  }
  // Whether the notes of `a` and `b` count in one slot (ClusterNode::notes_).
  static bool ShareASlot(ClusterNode& node, const std::string& a, const std::string& b) {
    std::lock_guard lock(node.mu_);
    return &node.NotesLocked(a) == &node.NotesLocked(b);
  }
  static void Follow(ClusterNode& node, const cluster::KeyValue& kv, bool deleted) {
    node.Follow(kv, deleted);
  }
  // The deploy recorded for each name: its number and deploy time.
  static std::map<std::string, std::pair<uint64_t, int64_t>> Recorded(ClusterNode& node) {
    std::lock_guard lock(node.mu_);
    std::map<std::string, std::pair<uint64_t, int64_t>> out;
    for (const auto& [name, id] : node.recorded_) out[name] = {id.number, id.deployed_at_ms};
    return out;
  }
  static size_t NewestRevisions(ClusterNode& node) {
    std::lock_guard lock(node.mu_);
    return node.newest_revision_.size();
  }
};

namespace {

using TestPoint = ClusterNodeTestPeer::TestPoint;

constexpr int64_t kFirstDeployAt = 1000;  // each function's first deploy, long before any made now

runtime::FunctionSpec Spec(const std::string& name) {
  runtime::FunctionSpec spec;
  spec.name = name;
  spec.executable = "/bin/true";
  spec.instances = 0;  // scales to zero: no process runs for it
  return spec;
}

class ClusterNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-cluster-node-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/functions");
    auto executables =
        Executables::Open({.functions_dirs = {dir_ + "/functions"}, .artifacts_dir = dir_ + "/art"});
    ASSERT_TRUE(executables.ok()) << executables.status().ToString();
    executables_ = std::move(executables).value();
  }
  void TearDown() override {
    node_.reset();
    manager_.reset();
    std::filesystem::remove_all(dir_);
  }

  // The manager serving version 1 of each of `names`, deployed at kFirstDeployAt.
  void OpenManager(const std::vector<std::string>& names) {
    runtime::FunctionRegistry registry;
    for (const std::string& name : names) {
      registry.serving.push_back({.number = 1, .spec = Spec(name), .deployed_at_ms = kFirstDeployAt});
    }
    ASSERT_TRUE(runtime::SaveFunctionRegistry(dir_ + "/functions.json", registry).ok());
    auto manager = runtime::InstanceManager::Open({.data_dir = dir_});
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(manager).value();
  }
  // The node, of the etcd at `etcd` (nothing answers there unless a test starts one).
  void MakeNode(cluster::EtcdOptions etcd = {.endpoints = {"http://127.0.0.1:1"}}) {
    auto client = cluster::Etcd::Make(std::move(etcd));
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    node_ = ClusterNodeTestPeer::Make(
        {.node = "node-a", .adopt_retry = std::chrono::hours(1), .recorded_path = RecordedPath()},
        std::move(client).value(), manager_.get(), executables_.get());
  }
  std::string RecordedPath() const { return dir_ + "/cluster-recorded.json"; }
  // Whether the node's file of what the registry records names `name`.
  bool InRecordedFile(const std::string& name) const {
    std::ifstream in(RecordedPath());
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j["recorded"].is_object() && j["recorded"].contains(name);
  }
  // Removes `name` here and registers it afresh (version 1 again, deployed now).
  void RedeployAfresh(const std::string& name) {
    ASSERT_TRUE(manager_->Remove(name).ok());
    ASSERT_TRUE(manager_->Register(Spec(name)).ok());
  }
  // The deploy serving `name`: its number and deploy time; (0, 0) when none.
  std::pair<uint64_t, int64_t> Serving(const std::string& name) const {
    Result<std::vector<runtime::VersionStatus>> versions = manager_->Versions(name);
    if (versions.ok()) {
      for (const runtime::VersionStatus& v : *versions) {
        if (v.state == "serving") return {v.version.number, v.version.deployed_at_ms};
      }
    }
    return {0, 0};
  }

  std::string dir_;
  std::unique_ptr<Executables> executables_;
  std::unique_ptr<runtime::InstanceManager> manager_;
  std::unique_ptr<ClusterNode> node_;
};

// A note that the registry records a function (a publish, an adoption) reads the deploy serving it,
// then notes it. A removal here (its own note after it) or a deploy afresh (noted too) between the
// two is not undone by the note of what was read before: the node does not record a deploy it no
// longer serves.
TEST_F(ClusterNodeTest, ANoteOfWhatServesIsNotOverAChangeNotedMeanwhile) {
  OpenManager({"removed", "redeployed"});
  MakeNode();
  bool changed = false;
  ClusterNodeTestPeer::SetHook(*node_, [&](TestPoint point, const std::string& name) {
    if (point != TestPoint::kRecording || changed) return;
    changed = true;
    if (name == "removed") {
      // As DELETE /v1/functions/{name} does: removed here, then the record forgotten.
      ASSERT_TRUE(manager_->Remove(name).ok());
      ClusterNodeTestPeer::NoteRecorded(*node_, name, false);
    } else {
      RedeployAfresh(name);
      ClusterNodeTestPeer::NoteRecorded(*node_, name, true);  // its publish
    }
  });

  ClusterNodeTestPeer::NoteRecorded(*node_, "removed", true);
  EXPECT_EQ(ClusterNodeTestPeer::Recorded(*node_).count("removed"), 0u) << "a removed deploy is recorded";

  changed = false;
  ClusterNodeTestPeer::NoteRecorded(*node_, "redeployed", true);
  const std::pair<uint64_t, int64_t> fresh = Serving("redeployed");
  ASSERT_NE(fresh.second, kFirstDeployAt);
  const auto recorded = ClusterNodeTestPeer::Recorded(*node_);
  ASSERT_EQ(recorded.count("redeployed"), 1u);
  EXPECT_EQ(recorded.at("redeployed"), fresh) << "the deploy replaced is recorded, not the one serving";
}

// A note of a name between a deletion's decision to remove it and the removal (a publish's, an
// adoption's) reads the deploy still serving, and notes it: the removal's own note, after it, drops
// that note too; none is left of a deploy the node no longer serves.
TEST_F(ClusterNodeTest, ANoteMadeWhileARemovalFromTheClusterIsUnderWayGoesWithIt) {
  OpenManager({"fn"});
  MakeNode();
  ClusterNodeTestPeer::NoteRecorded(*node_, "fn", true);
  ASSERT_EQ(ClusterNodeTestPeer::Recorded(*node_).count("fn"), 1u);
  ClusterNodeTestPeer::SetHook(*node_, [&](TestPoint point, const std::string& name) {
    if (point == TestPoint::kRemoving) ClusterNodeTestPeer::NoteRecorded(*node_, name, true);
  });
  ClusterNodeTestPeer::Follow(*node_, {.key = "/phos/functions/fn", .mod_revision = 2}, true);
  node_->Stop();  // the removal, posted to the node's threads, has run
  EXPECT_EQ(manager_->Versions("fn").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ClusterNodeTestPeer::Recorded(*node_).count("fn"), 0u) << "a removed deploy is recorded";
  EXPECT_FALSE(InRecordedFile("fn"));
}

// A removal that cannot be queued (the node stopping, or too many waiting) keeps the name's note:
// the next listing of the registry, here or after a restart, finds it missing and removes it then.
TEST_F(ClusterNodeTest, ARemovalFromTheClusterThatCannotBeQueuedKeepsItsNote) {
  OpenManager({"fn"});
  MakeNode();
  ClusterNodeTestPeer::NoteRecorded(*node_, "fn", true);
  node_->Stop();
  ClusterNodeTestPeer::Follow(*node_, {.key = "/phos/functions/fn", .mod_revision = 2}, true);
  EXPECT_EQ(Serving("fn").first, 1u);
  EXPECT_EQ(ClusterNodeTestPeer::Recorded(*node_).count("fn"), 1u) << "the removal is lost for good";
  EXPECT_TRUE(InRecordedFile("fn"));
  // Started again, the node reads the note (the name's registration with it) and removes the name
  // once it finds its record deleted.
  MakeNode();
  ASSERT_EQ(ClusterNodeTestPeer::Recorded(*node_).count("fn"), 1u);
  ClusterNodeTestPeer::Follow(*node_, {.key = "/phos/functions/fn", .mod_revision = 2}, true);
  node_->Stop();
  EXPECT_EQ(manager_->Versions("fn").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(InRecordedFile("fn"));
}

// A deletion from the cluster removes the registration of the name it noted here, whatever that
// deployed since: a newer version, a rollback (a deploy of its own, at another time), the noted
// version deleted. A name removed and registered afresh since stays. No note of any is left.
TEST_F(ClusterNodeTest, ARemovalFromTheClusterRemovesWhatTheNameDeployedSinceItsNote) {
  const std::vector<std::string> names = {"newer", "rolled-back", "deleted-version", "afresh"};
  OpenManager(names);
  MakeNode();
  for (const std::string& name : names) ClusterNodeTestPeer::NoteRecorded(*node_, name, true);
  auto deploy_version = [&](const std::string& name) {
    std::promise<runtime::DeployOutcome> deployed;  // at once: the manager keeps no snapshots
    manager_->DeployVersion(Spec(name), "", std::chrono::milliseconds(0),
                            [&](runtime::DeployOutcome o) { deployed.set_value(std::move(o)); });
    ASSERT_TRUE(deployed.get_future().get().status.ok());
  };
  deploy_version("newer");
  deploy_version("rolled-back");
  std::promise<runtime::DeployOutcome> rolled_back;
  manager_->Rollback("rolled-back", 1,
                     [&](runtime::DeployOutcome o) { rolled_back.set_value(std::move(o)); });
  ASSERT_TRUE(rolled_back.get_future().get().status.ok());
  ASSERT_EQ(Serving("rolled-back").first, 1u);
  ASSERT_NE(Serving("rolled-back").second, kFirstDeployAt);
  deploy_version("deleted-version");
  ASSERT_TRUE(manager_->DeleteVersion("deleted-version", 1).ok());
  RedeployAfresh("afresh");
  int64_t revision = 1;
  for (const std::string& name : names) {
    ClusterNodeTestPeer::Follow(*node_, {.key = "/phos/functions/" + name, .mod_revision = ++revision}, true);
  }
  node_->Stop();
  for (const char* name : {"newer", "rolled-back", "deleted-version"}) {
    EXPECT_EQ(manager_->Versions(name).status().code(), StatusCode::kNotFound) << name << " is not removed";
  }
  EXPECT_EQ(Serving("afresh").first, 1u);
  EXPECT_TRUE(ClusterNodeTestPeer::Recorded(*node_).empty());
}

// What an older node's file noted, a deploy without its registration: the deploy is removed with
// its name while the name holds it (serving, or kept after a newer version); a deploy afresh found
// there stays.
TEST_F(ClusterNodeTest, ARemovalOfANotedDeployRemovesWhatHoldsItOnly) {
  OpenManager({"recorded", "kept", "afresh"});
  std::promise<runtime::DeployOutcome> deployed;
  manager_->DeployVersion(Spec("kept"), "", std::chrono::milliseconds(0),
                          [&](runtime::DeployOutcome o) { deployed.set_value(std::move(o)); });
  ASSERT_TRUE(deployed.get_future().get().status.ok());
  RedeployAfresh("afresh");
  MakeNode();
  ClusterNodeTestPeer::RemoveHere(*node_, "recorded", 1, kFirstDeployAt);
  ClusterNodeTestPeer::RemoveHere(*node_, "kept", 1, kFirstDeployAt);
  ClusterNodeTestPeer::RemoveHere(*node_, "afresh", 1, kFirstDeployAt);
  ClusterNodeTestPeer::RemoveHere(*node_, "never-here", 1, kFirstDeployAt);
  node_->Stop();
  EXPECT_EQ(manager_->Versions("recorded").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(manager_->Versions("kept").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Serving("afresh").first, 1u);
}

// A note waits for the notes of names of its own slot only: another name's note meanwhile does not
// make it read what serves again (each read takes the manager's lock).
TEST_F(ClusterNodeTest, ANoteOfAnotherNameMeanwhileIsNoReasonToReadAgain) {
  std::string other = "other";
  OpenManager({"fn"});
  MakeNode();
  for (int i = 0; i < 1000 && ClusterNodeTestPeer::ShareASlot(*node_, "fn", other); ++i) {
    other = "other-" + std::to_string(i);
  }
  ASSERT_FALSE(ClusterNodeTestPeer::ShareASlot(*node_, "fn", other)) << "every name counts in one slot";
  int reads = 0;
  ClusterNodeTestPeer::SetHook(*node_, [&](TestPoint point, const std::string& name) {
    if (point != TestPoint::kRecording || name != "fn" || ++reads > 1) return;
    ClusterNodeTestPeer::NoteRecorded(*node_, other, false);  // as a removal of `other` here notes
  });
  ClusterNodeTestPeer::NoteRecorded(*node_, "fn", true);
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(ClusterNodeTestPeer::Recorded(*node_).count("fn"), 1u);
}

// The registry's events of functions made and deleted, none of them adopted here while they
// existed: the node keeps no revision of any of them.
TEST_F(ClusterNodeTest, FunctionsMadeAndDeletedLeaveNoRevisionBehind) {
  OpenManager({});
  MakeNode();
  ClusterRecord record;
  record.version.spec = Spec("fn");
  record.version.spec.instances = 1;
  record.version.executable_sha256 = std::string(64, 'a');
  record.node = "node-b";
  record.ranges = {{0, "manifests/fn/node-b-1"}, {1, "manifests/fn/node-b-2"}};
  int64_t revision = 1;
  for (int i = 0; i < 100; ++i) {
    const std::string name = "fn-" + std::to_string(i);
    record.version.spec.name = name;
    const std::string key = "/phos/functions/" + name;
    ClusterNodeTestPeer::Follow(
        *node_, {.key = key, .value = ClusterRecordToJson(record), .mod_revision = ++revision}, false);
    ClusterNodeTestPeer::Follow(*node_, {.key = key, .mod_revision = ++revision}, true);
  }
  EXPECT_EQ(ClusterNodeTestPeer::NewestRevisions(*node_), 0u);
}

// What the revisions are kept for: an adoption that fails while the registry shows a newer record of
// the name does not hold its failure against that record (the next invocation tries it at once); one
// that fails against the newest record does. Neither leaves a revision behind.
TEST_F(ClusterNodeTest, AFailedAdoptionOfARecordSupersededMeanwhileIsNotHeld) {
  testing::EtcdServer etcd_server;
  if (std::string why = etcd_server.Start(); !why.empty()) {
    if (why.find("not installed") != std::string::npos) GTEST_SKIP() << why;
    FAIL() << why;
  }
  OpenManager({});
  MakeNode(etcd_server.Options());
  auto etcd = cluster::Etcd::Make(etcd_server.Options());
  ASSERT_TRUE(etcd.ok());
  // A program outside the node's functions directories: each adoption fails, at once.
  ClusterRecord record;
  record.version.spec = Spec("evil");
  record.version.spec.executable = "/bin/sh";
  record.version.spec.instances = 1;
  record.version.executable_sha256 = std::string(64, 'a');
  record.node = "node-b";
  record.ranges = {{0, "manifests/evil/node-b-1"}, {1, "manifests/evil/node-b-2"}};
  const std::string key = "/phos/functions/evil";
  ASSERT_TRUE(etcd->Put(key, ClusterRecordToJson(record)).ok());

  bool superseded = false;
  ClusterNodeTestPeer::SetHook(*node_, [&](TestPoint point, const std::string&) {
    if (point != TestPoint::kAdopting || superseded) return;
    superseded = true;
    // A new version recorded while the adoption runs, shown by the watch.
    record.version.number = 2;
    const std::string value = ClusterRecordToJson(record);
    Result<int64_t> put = etcd->Put(key, value);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    ClusterNodeTestPeer::Follow(*node_, {.key = key, .value = value, .mod_revision = *put}, false);
  });
  auto serve = [&] {
    std::promise<Status> served;
    node_->Serve("evil", [&](Status s) { served.set_value(std::move(s)); });
    return served.get_future().get();
  };

  const Status first = serve();
  EXPECT_EQ(first.code(), StatusCode::kInvalidArgument) << first.ToString();
  EXPECT_TRUE(superseded);
  EXPECT_EQ(ClusterNodeTestPeer::NewestRevisions(*node_), 0u);
  const Status second = serve();  // tried at once: the newest record, adopted and failing
  EXPECT_EQ(second.code(), StatusCode::kInvalidArgument) << second.ToString();
  EXPECT_EQ(second.message().find("not tried again"), std::string::npos) << second.message();
  const Status third = serve();  // held
  EXPECT_NE(third.message().find("failed 1 time(s) in a row; not tried again"), std::string::npos)
      << third.message();
  EXPECT_EQ(ClusterNodeTestPeer::NewestRevisions(*node_), 0u);
}

}  // namespace
}  // namespace phos::phosd
