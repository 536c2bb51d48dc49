// This phosd as a node of a cluster (docs/design.md D19): several phosd share one function
// registry in etcd and one snapshot tier in an S3-compatible bucket.
//
// - Liveness: the node's record, /phos/nodes/<node> (its endpoint, device kind and count), lives
//   under a lease it keeps alive; a node that dies drops out when its lease expires.
// - Publishing: a version deployed here (InstanceManagerOptions::on_deployed) is uploaded to the
//   bucket, every range's snapshot, and then — only then, so that a record never names what the
//   bucket lacks — recorded as /phos/functions/<name>: its number, spec, executable digest and,
//   per instance range, the range and the manifest's object.
// - Serving: a function this node does not know but the registry does is adopted when it is first
//   invoked here (InstanceManager::Adopt, its snapshots imported from the bucket); a new record of
//   a function it serves is adopted as it is written (a watch); a record deleted removes it.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "executables.h"
#include "phos/base/status.h"
#include "phos/base/task_threads.h"
#include "phos/cluster/etcd.h"
#include "phos/objstore/s3.h"
#include "phos/runtime/instance_manager.h"
#include "phos/store/snapshot_uploader.h"
#include "phos/store/store.h"

namespace phos::phosd {

struct ClusterOptions {
  std::vector<std::string> etcd_endpoints;  // "http://127.0.0.1:2379"
  std::string node;      // this node's name: [A-Za-z0-9_.-], 1..64 characters
  std::string endpoint;  // where the other nodes and clients reach its HTTP API (empty: Join's)
  int64_t ttl_seconds = 10;  // the node's lease: how long a dead node stays listed
  // After an adoption fails, its function's invocations get that failure at once for this long
  // before the next try, doubled per failure in a row (at most kMostAdoptRetry): a record that
  // cannot be adopted costs one import and run to the entry point per wait, not per invocation.
  std::chrono::milliseconds adopt_retry{1000};
  // Where the node keeps the names of the functions it serves that the registry recorded, so that
  // one deleted from the cluster while the node was away is removed here when it comes back
  // (<data-dir>/cluster-recorded.json); empty: not kept, such a deletion is not seen.
  std::string recorded_path;
  std::string device_profile;
  int devices = 0;
};

// A function as the registry records it (/phos/functions/<name>).
struct ClusterRecord {
  runtime::FunctionVersion version;  // spec.name the function's
  std::string node;                  // deployed there
  struct Range {
    int va_slot = -1;
    std::string manifest;  // the object of its snapshot's manifest in the bucket
  };
  std::vector<Range> ranges;
  int64_t revision = 0;  // etcd's revision of the record as read (ClusterNode::Record); not in its JSON
};
std::string ClusterRecordToJson(const ClusterRecord& record);
// What etcd holds is checked as any outside input: InvalidArgument naming the bad field.
Result<ClusterRecord> ParseClusterRecord(const std::string& json);

class ClusterNode {
 public:
  // Reaches the cluster's etcd (Unavailable when it does not answer). `manager`, `store`,
  // `executables` and `uploader` must outlive the node (the uploader's last callbacks reach it).
  static Result<std::unique_ptr<ClusterNode>> Connect(ClusterOptions options, runtime::InstanceManager* manager,
                                                      store::Store* store, const Executables* executables,
                                                      objstore::S3Client bucket, store::SnapshotUploader* uploader);
  // Joins: the node's record under a lease, with `endpoint` (ClusterOptions::endpoint when that is
  // empty), and the watch of the registry. AlreadyExists when a live node has this node's name.
  Status Join(const std::string& endpoint);
  // Leaves: the lease revoked (the node's record goes at once: nobody sends it more), the watch and
  // the lookups not begun stopped. Before the instance manager ends: nothing here calls it
  // afterwards, but an upload's last callback. Idempotent.
  void Stop();
  ~ClusterNode() { Stop(); }
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // Uploads `deployed`'s snapshots and records it in the registry (in the background).
  void Announce(const runtime::DeployedVersion& deployed);
  // Once `name` is served here: Ok at once when it is; else adopted from the registry, `done`
  // called when that ends (from another thread). NotFound when the registry has no such function.
  void Serve(const std::string& name, std::function<void(Status)> done);
  // The registry's record of `name`; NotFound when it has none.
  Result<ClusterRecord> Record(const std::string& name) const;
  // The same, `done` called from another thread (Unavailable once the node stops).
  void FindRecord(const std::string& name, std::function<void(Result<ClusterRecord>)> done);
  // Deletes `name`'s record: every node removes it.
  Status Forget(const std::string& name);
  // The nodes alive, as their records say: [{"node", "endpoint", "device_profile", "devices"}].
  Result<nlohmann::json> Nodes() const;
  const std::string& node() const { return options_.node; }

 private:
  // tests/phosd/cluster_node_test.cc: the node's steps driven one by one, a race's two sides
  // interleaved at the points below.
  friend class ClusterNodeTestPeer;
  enum class TestPoint {
    kRecording,  // NoteRecorded read what serves the name, and has not yet noted it
    kRemoving,   // RemoveHere's task is about to remove the name (its note still stands)
    kAdopting,   // Serve's adoption read the name's record, and has not yet adopted it
  };
  ClusterNode(ClusterOptions options, cluster::Etcd etcd, runtime::InstanceManager* manager, store::Store* store,
              const Executables* executables, objstore::S3Client bucket, store::SnapshotUploader* uploader);
  // Queues `task` on the lookup threads; false (nothing queued) when stopping or when too many wait
  // already: a caller without a token cannot make a node hold more.
  bool Post(std::function<void()> task);
  static std::string FunctionKey(const std::string& name) { return "/phos/functions/" + name; }
  // Adopts `record` (InstanceManager::Adopt); `done` gets how it went.
  void Adopt(const ClusterRecord& record, std::function<void(Status)> done);
  // Notes how the adoption of version `version` of `name`, recorded at etcd revision `revision`,
  // went (failed_); a failure is not held against a newer record the watch showed meanwhile.
  void NoteAdoption(const std::string& name, uint64_t version, int64_t revision, const Status& status);
  // A deploy of a function here: its number and when it was deployed (a name deployed afresh after
  // a removal starts at number 1 again, so the number alone does not tell two deploys apart), and
  // when the name was registered here (runtime::VersionStatus::registered_at_ms: the same for all
  // its versions until it is removed; 0: not known, what an older node's file did not keep). An
  // empty one (number 0) stands for any deploy (what a still older file did not keep either).
  using DeployId = runtime::HeldFunction;
  // Notes that the registry records `name`, which this node serves (the deploy serving it now), and
  // keeps the set at ClusterOptions::recorded_path. What serves is read outside mu_, and noted only
  // if no other note of a name of its slot came meanwhile (notes_); else read again.
  void NoteRecorded(const std::string& name);
  // Notes that the registry no longer records `name`; with `removed`, only a note of what `removed`
  // names (DeployId::SameAs) is dropped: one of a deploy made afresh since stays.
  void NoteUnrecorded(const std::string& name, const std::optional<DeployId>& removed = std::nullopt);
  // The count of notes_ of `name`'s slot; the caller holds mu_.
  uint64_t& NotesLocked(const std::string& name) {
    return notes_[std::hash<std::string>{}(name) % notes_.size()];
  }
  // Writes recorded_ to ClusterOptions::recorded_path (takes save_mu_, then mu_ briefly).
  void SaveRecorded();
  // The deploy serving `name` here; nullopt: none.
  std::optional<DeployId> Serving(const std::string& name) const;
  // Removes `name` here if it is still what `deleted`, the note of it the registry's deletion
  // found, names (InstanceManager::RemoveIfHeld: the same registration, whatever versions or
  // rollbacks it deployed since; without one, that deploy among its versions), as the removal
  // checks it: a name deleted from the cluster and deployed here afresh, even while this runs,
  // stays. The note goes once the manager answered (removed, or nothing of it here); until then it
  // stands, so that the next listing of the registry (CatchUp) tries again when this could not be
  // queued or the removal failed. `why` for the log.
  void RemoveHere(const std::string& name, DeployId deleted, const char* why);
  // Records `record` in the registry, once every range's snapshot is in the bucket — unless the
  // version no longer serves here (removed, or replaced meanwhile), or the registry holds another
  // node's deploy of the name that is not older (two deploys at once: the first recorded stays).
  void Publish(const ClusterRecord& record);
  // Adopts the registry's version of each function this node serves another version of: after a
  // watch (re)starts, what changed while none watched. The revision to watch from; nullopt when
  // the registry could not be listed.
  std::optional<int64_t> CatchUp();
  void WatchRegistry();
  // What the registry's change of `kv` means here: a record deleted removes the function, another
  // version of one this node serves is adopted.
  void Follow(const cluster::KeyValue& kv, bool deleted);

  ClusterOptions options_;
  const cluster::Etcd etcd_;
  runtime::InstanceManager* const manager_;
  store::Store* const store_;
  const Executables* const executables_;
  const objstore::S3Client bucket_;
  store::SnapshotUploader* const uploader_;
  std::unique_ptr<cluster::LeaseKeeper> lease_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  // The newest revision of each name's record (put or deleted) the watch has shown while an
  // adoption of the name was under way (adopting_): that adoption, of an older record, does not
  // hold its failure against it. Only then: an adoption reads its record after it is listed in
  // adopting_, and etcd's reads are linearizable, so what the watch showed before then is no newer
  // than what it reads. The entry goes with the adoption: a node that sees many functions made
  // and deleted keeps none of them here.
  std::map<std::string, int64_t> newest_revision_;
  // Adoptions under way, by name: whoever else asks waits for the same one.
  std::map<std::string, std::vector<std::function<void(Status)>>> adopting_;
  // The last adoption of a name failed: why, how many times in a row, of which version, and when
  // the next may be tried (ClusterOptions::adopt_retry). A new record of the name forgets it.
  struct FailedAdoption {
    Status status;
    int failures = 0;
    uint64_t version = 0;
    int64_t revision = 0;  // the record's
    std::chrono::steady_clock::time_point retry_at;
  };
  std::map<std::string, FailedAdoption> failed_;
  // The functions served here that the registry recorded, as last seen, with the deploy that served
  // each (kept at ClusterOptions::recorded_path): one of them missing from the registry was deleted.
  std::map<std::string, DeployId> recorded_;
  // The notes of recorded_ so far (NoteRecorded, NoteUnrecorded), per slot of names (a hash of the
  // name picks its slot): a note waits for another only when their names share a slot, and the
  // counts take the same room however many names come and go.
  std::array<uint64_t, 64> notes_{};
  std::mutex save_mu_;  // orders the writes of recorded_
  std::unique_ptr<TaskThreads> work_ = std::make_unique<TaskThreads>(2);  // lookups and adoptions
  int queued_ = 0;  // tasks posted to work_ and not yet begun (Post)
  std::thread watcher_;
  // Called at each TestPoint when set (before anything is posted to work_); tests only.
  std::function<void(TestPoint, const std::string& name)> test_hook_;
};

}  // namespace phos::phosd
