#include "cluster_node.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "phos/base/durable_file.h"
#include "phos/base/log.h"
#include "phos/runtime/instance_registry.h"

namespace phos::phosd {
namespace {

constexpr const char* kFunctions = "/phos/functions/";
constexpr const char* kNodes = "/phos/nodes/";

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string ClusterRecordToJson(const ClusterRecord& record) {
  nlohmann::json ranges = nlohmann::json::array();
  for (const ClusterRecord::Range& r : record.ranges) ranges.push_back({{"va_slot", r.va_slot}, {"manifest", r.manifest}});
  return nlohmann::json{{"format_version", 1},
                        {"version", nlohmann::json::parse(runtime::FunctionVersionToJson(record.version))},
                        {"node", record.node},
                        {"ranges", std::move(ranges)}}
      .dump();
}

Result<ClusterRecord> ParseClusterRecord(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("a function's record is not a JSON object");
  auto field = [&](const char* name) -> const nlohmann::json* {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const nlohmann::json* format = field("format_version");
  if (format == nullptr || !format->is_number_unsigned() || format->get<uint64_t>() != 1) {
    return Status::InvalidArgument("a function's record: 'format_version' must be 1 (written by another phos?)");
  }
  ClusterRecord record;
  const nlohmann::json* version = field("version");
  if (version == nullptr || !version->is_object()) {
    return Status::InvalidArgument("a function's record: 'version' must be an object");
  }
  PHOS_ASSIGN_OR_RETURN(record.version, runtime::ParseFunctionVersionJson(version->dump()));
  const std::string& name = record.version.spec.name;
  // A node runs only the program the record names: no digest, no adoption.
  if (!runtime::IsSha256Hex(record.version.executable_sha256)) {
    return Status::InvalidArgument("the record of '" + name + "': 'executable_sha256' is required");
  }
  // All but the executable's file, which is this node's to check when it adopts the function (it
  // may be missing here, and is said so then).
  if (Status valid = runtime::ValidateFunctionSpecFields(record.version.spec); !valid.ok()) {
    return valid.WithContext("the record of '" + name + "'");
  }
  const nlohmann::json* node = field("node");
  if (node == nullptr || !node->is_string()) {
    return Status::InvalidArgument("the record of '" + name + "': 'node' must be a string");
  }
  record.node = node->get<std::string>();
  const nlohmann::json* ranges = field("ranges");
  if (ranges == nullptr || !ranges->is_array() ||
      ranges->size() != static_cast<size_t>(runtime::InstanceRanges(record.version.spec))) {
    return Status::InvalidArgument(fmt::format("the record of '{}': 'ranges' must list its {} instance ranges", name,
                                               runtime::InstanceRanges(record.version.spec)));
  }
  const std::string prefix = "manifests/";
  for (const nlohmann::json& r : *ranges) {
    auto slot = r.is_object() ? r.find("va_slot") : r.end();
    auto manifest = r.is_object() ? r.find("manifest") : r.end();
    if (!r.is_object() || slot == r.end() || !slot->is_number_unsigned() || slot->get<uint64_t>() > 65535 ||
        manifest == r.end() || !manifest->is_string() || manifest->get<std::string>().rfind(prefix, 0) != 0 ||
        manifest->get<std::string>().size() > 1024) {
      return Status::InvalidArgument("the record of '" + name +
                                     "': each range must be {\"va_slot\": N, \"manifest\": \"manifests/...\"}");
    }
    record.ranges.push_back({static_cast<int>(slot->get<uint64_t>()), manifest->get<std::string>()});
  }
  return record;
}

ClusterNode::ClusterNode(ClusterOptions options, cluster::Etcd etcd, runtime::InstanceManager* manager,
                         store::Store* store, const Executables* executables, objstore::S3Client bucket,
                         store::SnapshotUploader* uploader)
    : options_(std::move(options)),
      etcd_(std::move(etcd)),
      manager_(manager),
      store_(store),
      executables_(executables),
      bucket_(std::move(bucket)),
      uploader_(uploader) {
  if (options_.recorded_path.empty()) return;
  std::ifstream in(options_.recorded_path);
  if (!in) return;  // none yet
  // phosd's own file, read as carefully as any: what cannot be read is started afresh.
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json* recorded = j.is_object() && j.contains("recorded") ? &j["recorded"] : nullptr;
  if (recorded != nullptr && recorded->is_object()) {
    for (const auto& [name, deploy] : recorded->items()) {
      // A deploy that cannot be read matches whatever serves the name, as a name-only entry does;
      // one without its registration (an older phosd's) is compared as a deploy.
      DeployId id;
      if (deploy.is_object()) {
        auto number = deploy.find("number");
        auto at = deploy.find("deployed_at_ms");
        if (number != deploy.end() && number->is_number_unsigned() && at != deploy.end() && at->is_number_integer()) {
          id.number = number->get<uint64_t>();
          id.deployed_at_ms = at->get<int64_t>();
          auto registered = deploy.find("registered_at_ms");
          if (registered != deploy.end() && registered->is_number_integer()) {
            id.registered_at_ms = registered->get<int64_t>();
          }
        }
      }
      recorded_[name] = id;
    }
  } else if (recorded != nullptr && recorded->is_array()) {
    // Names only (a file of an earlier phosd): whichever deploy serves them.
    for (const nlohmann::json& name : *recorded) {
      if (name.is_string()) recorded_[name.get<std::string>()] = DeployId{};
    }
  } else {
    PHOS_LOG(Warn, "cluster", "{} is not a list of recorded functions; starting without it", options_.recorded_path);
  }
}

Result<std::unique_ptr<ClusterNode>> ClusterNode::Connect(ClusterOptions options, runtime::InstanceManager* manager,
                                                          store::Store* store, const Executables* executables,
                                                          objstore::S3Client bucket,
                                                          store::SnapshotUploader* uploader) {
  PHOS_ASSIGN_OR_RETURN(cluster::Etcd etcd, cluster::Etcd::Make({.endpoints = options.etcd_endpoints}));
  PHOS_RETURN_IF_ERROR(etcd.Ping());
  return std::unique_ptr<ClusterNode>(new ClusterNode(std::move(options), std::move(etcd), manager, store,
                                                      executables, std::move(bucket), uploader));
}

Status ClusterNode::Join(const std::string& endpoint) {
  if (options_.endpoint.empty()) options_.endpoint = endpoint;
  PHOS_ASSIGN_OR_RETURN(int64_t lease, etcd_.GrantLease(options_.ttl_seconds));
  const std::string me = nlohmann::json{{"node", options_.node},
                                        {"endpoint", options_.endpoint},
                                        {"device_profile", options_.device_profile},
                                        {"devices", options_.devices},
                                        {"started_at_ms", UnixMillisNow()}}
                             .dump();
  // Another live node of this name holds its record under its own lease: two would answer for one.
  Result<bool> claimed = etcd_.PutIf(kNodes + options_.node, me, 0, lease);
  if (!claimed.ok() || !*claimed) {
    (void)etcd_.Revoke(lease);
    if (!claimed.ok()) return claimed.status();
    return Status::AlreadyExists("a live node of the cluster is named '" + options_.node + "' already (--node-name)");
  }
  lease_ = std::make_unique<cluster::LeaseKeeper>(etcd_, lease, options_.ttl_seconds, [name = options_.node] {
    // Its record is gone: the others see it dead. It serves on; a restart joins again.
    PHOS_LOG(Error, "cluster", "node '{}' lost its lease: the cluster no longer lists it", name);
  });
  watcher_ = std::thread([this] { WatchRegistry(); });
  PHOS_LOG(Info, "cluster", "node '{}' joined the cluster at {}", options_.node, options_.endpoint);
  return Status::Ok();
}

void ClusterNode::Stop() {
  lease_.reset();  // revoked: the node's record goes now, not at its lease's end
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  work_.reset();  // what was posted runs: the manager refuses adoptions once it shuts down
}

bool ClusterNode::Post(std::function<void()> task) {
  constexpr int kMostQueued = 256;
  std::lock_guard lock(mu_);
  if (stopping_ || queued_ >= kMostQueued) return false;
  ++queued_;
  work_->Post([this, task = std::move(task)] {
    {
      std::lock_guard lock(mu_);
      --queued_;
    }
    task();
  });
  return true;
}

std::optional<ClusterNode::DeployId> ClusterNode::Serving(const std::string& name) const {
  Result<std::vector<runtime::VersionStatus>> versions = manager_->Versions(name);
  if (!versions.ok()) return std::nullopt;
  for (const runtime::VersionStatus& v : *versions) {
    if (v.state == "serving") {
      return DeployId{.registered_at_ms = v.registered_at_ms,
                      .number = v.version.number,
                      .deployed_at_ms = v.version.deployed_at_ms};
    }
  }
  return std::nullopt;
}

void ClusterNode::Announce(const runtime::DeployedVersion& deployed) {
  if (deployed.ranges.empty() || deployed.ranges[0].snapshot == 0) {
    // The function made no CUDA call: nothing to fetch, nothing to adopt.
    PHOS_LOG(Warn, "cluster", "version {} of '{}' is not published to the cluster: it holds no GPU state",
             deployed.version.number, deployed.version.spec.name);
    return;
  }
  struct Upload {
    std::mutex mu;
    ClusterRecord record;
    size_t left = 0;
  };
  auto upload = std::make_shared<Upload>();
  upload->record.version = deployed.version;
  upload->record.node = options_.node;
  upload->record.ranges.resize(deployed.ranges.size());
  upload->left = deployed.ranges.size();
  for (size_t i = 0; i < deployed.ranges.size(); ++i) upload->record.ranges[i].va_slot = deployed.ranges[i].va_slot;
  for (size_t i = 0; i < deployed.ranges.size(); ++i) {
    // A failed upload leaves its range without a manifest: Publish refuses the record (the
    // uploader logged why).
    uploader_->Enqueue(deployed.ranges[i].store_function, deployed.ranges[i].snapshot,
                       [this, upload, i](Result<std::string> key) {
                         bool last = false;
                         {
                           std::lock_guard lock(upload->mu);
                           if (key.ok()) upload->record.ranges[i].manifest = *key;
                           last = --upload->left == 0;
                         }
                         if (last) Publish(upload->record);
                       });
  }
}

void ClusterNode::Publish(const ClusterRecord& record) {
  const std::string& name = record.version.spec.name;
  const uint64_t number = record.version.number;
  auto refuse = [&](const std::string& why) {
    PHOS_LOG(Error, "cluster", "version {} of '{}' is not published: {}", number, name, why);
  };
  for (const ClusterRecord::Range& r : record.ranges) {
    if (r.manifest.empty()) return refuse("a snapshot of it did not reach the bucket");
  }
  // Removed (or replaced, or removed and deployed afresh) while it uploaded: a record now would
  // bring back what was taken away.
  const std::optional<DeployId> serving = Serving(name);
  if (!serving || serving->number != number || serving->deployed_at_ms != record.version.deployed_at_ms) {
    return refuse("it no longer serves here");
  }
  Result<std::optional<cluster::KeyValue>> current = etcd_.Get(FunctionKey(name));
  if (!current.ok()) return refuse(current.status().message());
  int64_t expected = 0;
  if (current->has_value()) {
    expected = (*current)->mod_revision;
    Result<ClusterRecord> there = ParseClusterRecord((*current)->value);
    if (there.ok() && there->node != record.node && there->version.number >= number) {
      return refuse(fmt::format("the cluster holds version {} of it, deployed on node '{}'", there->version.number,
                                there->node));
    }
  }
  // Against the record read: a deploy recorded meanwhile elsewhere is not overwritten.
  Result<bool> put = etcd_.PutIf(FunctionKey(name), ClusterRecordToJson(record), expected);
  if (!put.ok()) return refuse(put.status().message());
  if (!*put) return refuse("another node recorded a deploy of it meanwhile");
  NoteRecorded(name);
  PHOS_LOG(Info, "cluster", "version {} of '{}' published to the cluster", number, name);
}

Result<ClusterRecord> ClusterNode::Record(const std::string& name) const {
  PHOS_ASSIGN_OR_RETURN(std::optional<cluster::KeyValue> kv, etcd_.Get(FunctionKey(name)));
  if (!kv) return Status::NotFound("no function '" + name + "' in the cluster");
  Result<ClusterRecord> record = ParseClusterRecord(kv->value);
  if (!record.ok()) return record.status().WithContext("the cluster's record of '" + name + "'");
  if (record->version.spec.name != name) {
    return Status::InvalidArgument("the cluster's record of '" + name + "' names another function");
  }
  record->revision = kv->mod_revision;
  return record;
}

void ClusterNode::FindRecord(const std::string& name, std::function<void(Result<ClusterRecord>)> done) {
  auto shared = std::make_shared<std::function<void(Result<ClusterRecord>)>>(std::move(done));
  if (!Post([this, name, shared] { (*shared)(Record(name)); })) {
    (*shared)(Status::Unavailable("the cluster's registry is busy or phosd is stopping; try again"));
  }
}

void ClusterNode::Serve(const std::string& name, std::function<void(Status)> done) {
  if (manager_->Spec(name)) return done(Status::Ok());
  std::optional<Status> waiting_to_retry;
  {
    std::lock_guard lock(mu_);
    auto failed = failed_.find(name);
    const auto now = std::chrono::steady_clock::now();
    if (failed != failed_.end() && now < failed->second.retry_at) {
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(failed->second.retry_at - now).count() + 1;
      waiting_to_retry = Status(failed->second.status.code(),
                                fmt::format("{} (its adoption failed {} time(s) in a row; not tried again for {} s)",
                                            failed->second.status.message(), failed->second.failures, left));
    }
  }
  if (waiting_to_retry) return done(*waiting_to_retry);
  auto finish = [this, name](Status status) {
    std::vector<std::function<void(Status)>> waiting;
    {
      std::lock_guard lock(mu_);
      waiting.swap(adopting_[name]);
      adopting_.erase(name);
      newest_revision_.erase(name);
    }
    for (auto& cb : waiting) cb(status);
  };
  {
    std::lock_guard lock(mu_);
    auto& waiting = adopting_[name];
    waiting.push_back(std::move(done));
    if (waiting.size() > 1) return;  // the adoption under way answers it
  }
  const bool posted = Post([this, name, finish] {
    Result<ClusterRecord> record = Record(name);
    if (!record.ok()) return finish(record.status());
    if (test_hook_) test_hook_(TestPoint::kAdopting, name);
    Adopt(*record, [this, name, number = record->version.number, revision = record->revision, finish](Status adopted) {
      NoteAdoption(name, number, revision, adopted);
      finish(std::move(adopted));
    });
  });
  if (!posted) finish(Status::Unavailable("the cluster's registry is busy or phosd is stopping; try again"));
}

void ClusterNode::Adopt(const ClusterRecord& record, std::function<void(Status)> done) {
  runtime::AdoptedVersion adopted;
  adopted.version = record.version;
  // Only what a deploy on this node may run: the record's executable, under this node's functions
  // directories or among its artifacts, and the program the record's digest names.
  Result<std::string> executable = executables_->Resolve(record.version.spec.executable);
  if (!executable.ok()) {
    return done(executable.status().WithContext(fmt::format("adopt version {} of '{}' deployed on node '{}'",
                                                            record.version.number, record.version.spec.name,
                                                            record.node)));
  }
  adopted.version.spec.executable = *executable;
  std::vector<std::string> manifests;
  for (const ClusterRecord::Range& r : record.ranges) {
    adopted.va_slots.push_back(r.va_slot);
    manifests.push_back(r.manifest);
  }
  adopted.import = [this, manifests](const std::string& store_function) -> Result<std::vector<uint64_t>> {
    std::vector<uint64_t> versions;
    for (const std::string& key : manifests) {
      PHOS_ASSIGN_OR_RETURN(store::ImportStats stats, store::ImportFromBucket(*store_, bucket_, key, store_function));
      versions.push_back(stats.version);
    }
    return versions;
  };
  PHOS_LOG(Info, "cluster", "adopting version {} of '{}' (deployed on node '{}')", record.version.number,
           record.version.spec.name, record.node);
  manager_->Adopt(std::move(adopted), [done = std::move(done)](runtime::DeployOutcome outcome) {
    done(outcome.status);
  });
}

void ClusterNode::NoteRecorded(const std::string& name) {
  // What serves is not read under mu_ (the manager writes functions.json under its own lock), so
  // the deploy may change between the read and the note: one removed, or replaced, is followed by
  // a note of its own, and a note of what was read before that note would undo it. It is noted only
  // if no note of a name of its slot came meanwhile, else read again: the last note is of what
  // served after every change another note followed. A removal's note follows the removal
  // (RemoveHere), so what is read before it is read again.
  for (;;) {
    uint64_t notes = 0;
    {
      std::lock_guard lock(mu_);
      notes = NotesLocked(name);
    }
    const std::optional<DeployId> serving = Serving(name);
    if (!serving) return;  // removed meanwhile: nothing here to remove later
    if (test_hook_) test_hook_(TestPoint::kRecording, name);
    std::lock_guard lock(mu_);
    if (NotesLocked(name) != notes) continue;
    ++NotesLocked(name);
    auto [it, added] = recorded_.try_emplace(name, *serving);
    const bool changed = added || it->second != *serving;
    it->second = *serving;
    if (!changed) return;
    break;
  }
  SaveRecorded();
}

void ClusterNode::NoteUnrecorded(const std::string& name, const std::optional<DeployId>& removed) {
  {
    std::lock_guard lock(mu_);
    ++NotesLocked(name);  // a note of what served before this is read again
    auto it = recorded_.find(name);
    if (it == recorded_.end() || (removed && !it->second.SameAs(*removed))) return;
    recorded_.erase(it);
  }
  SaveRecorded();
}

void ClusterNode::SaveRecorded() {
  if (options_.recorded_path.empty()) return;
  // One write at a time, each of the set as it is then; the disk is not waited for under mu_.
  std::lock_guard saving(save_mu_);
  std::string text;
  {
    std::lock_guard lock(mu_);
    nlohmann::json recorded = nlohmann::json::object();
    for (const auto& [name, id] : recorded_) {
      recorded[name] = {{"number", id.number}, {"deployed_at_ms", id.deployed_at_ms}};
      if (id.registered_at_ms != 0) recorded[name]["registered_at_ms"] = id.registered_at_ms;
    }
    text = nlohmann::json{{"recorded", std::move(recorded)}}.dump() + "\n";
  }
  if (Status s = ReplaceFileDurably(options_.recorded_path, text, 0600); !s.ok()) {
    PHOS_LOG(Warn, "cluster", "the functions the registry records are not kept: {}", s.message());
  }
}

void ClusterNode::RemoveHere(const std::string& name, DeployId deleted, const char* why) {
  const bool posted = Post([this, name, deleted, why] {
    if (test_hook_) test_hook_(TestPoint::kRemoving, name);
    // Checked as it is removed: a deploy of the name afresh arriving meanwhile is not taken for it.
    const Status removed = manager_->RemoveIfHeld(name, deleted);
    if (removed.ok()) {
      PHOS_LOG(Info, "cluster", "'{}' was removed from the cluster {}: removed here", name, why);
    } else if (removed.code() == StatusCode::kFailedPrecondition) {
      const std::optional<DeployId> serving = Serving(name);
      PHOS_LOG(Info, "cluster",
               "'{}' was removed from the cluster {}, but another deploy of it serves here ({}): {}, kept",
               name, why, removed.message(),
               serving ? fmt::format("version {} deployed at {} ms", serving->number, serving->deployed_at_ms)
                       : std::string("none now"));
    } else if (removed.code() != StatusCode::kNotFound) {  // NotFound: nothing serves it here
      // Its note stands: the next listing of the registry tries again.
      PHOS_LOG(Warn, "cluster", "'{}' is not removed here: {}", name, removed.message());
      return;
    }
    NoteUnrecorded(name, deleted);
  });
  if (!posted) {
    PHOS_LOG(Warn, "cluster",
             "'{}' was removed from the cluster {}, and is not removed here yet: the node is stopping or "
             "busy (tried again when it next lists the registry)",
             name, why);
  }
}

void ClusterNode::NoteAdoption(const std::string& name, uint64_t version, int64_t revision,
                               const Status& status) {
  constexpr std::chrono::milliseconds kMostAdoptRetry = std::chrono::minutes(5);
  if (status.ok()) {
    {
      std::lock_guard lock(mu_);
      failed_.erase(name);
    }
    NoteRecorded(name);
    return;
  }
  std::lock_guard lock(mu_);
  if (auto newest = newest_revision_.find(name); newest != newest_revision_.end() && newest->second > revision) {
    // The registry showed another record of the name meanwhile: the next invocation tries that.
    PHOS_LOG(Warn, "cluster", "version {} of '{}' could not be adopted (a newer record is tried next): {}", version,
             name, status.message());
    return;
  }
  FailedAdoption& failed = failed_[name];
  failed.failures = failed.version == version ? failed.failures + 1 : 1;
  failed.version = version;
  failed.revision = revision;
  failed.status = status;
  const int doublings = std::min(failed.failures - 1, 20);
  const auto wait = std::min<std::chrono::milliseconds>(options_.adopt_retry * (int64_t{1} << doublings), kMostAdoptRetry);
  failed.retry_at = std::chrono::steady_clock::now() + wait;
  PHOS_LOG(Warn, "cluster", "version {} of '{}' could not be adopted ({} time(s) in a row; next try in {} ms): {}",
           version, name, failed.failures, wait.count(), status.message());
}

Status ClusterNode::Forget(const std::string& name) {
  NoteUnrecorded(name);
  return etcd_.Delete(FunctionKey(name));
}

Result<nlohmann::json> ClusterNode::Nodes() const {
  PHOS_ASSIGN_OR_RETURN(std::vector<cluster::KeyValue> kvs, etcd_.List(kNodes));
  nlohmann::json nodes = nlohmann::json::array();
  for (const cluster::KeyValue& kv : kvs) {
    nlohmann::json n = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
    if (n.is_discarded() || !n.is_object()) continue;  // not a node's record: not listed
    nlohmann::json shown = nlohmann::json::object();
    for (const char* field : {"node", "endpoint", "device_profile", "devices", "started_at_ms"}) {
      if (auto it = n.find(field); it != n.end()) shown[field] = *it;
    }
    nodes.push_back(std::move(shown));
  }
  return nodes;
}

std::optional<int64_t> ClusterNode::CatchUp() {
  // Taken before the listing: a name recorded after it (a publish meanwhile) is in the listing.
  std::map<std::string, DeployId> was_recorded;
  {
    std::lock_guard lock(mu_);
    was_recorded = recorded_;
  }
  int64_t revision = 0;
  Result<std::vector<cluster::KeyValue>> records = etcd_.List(kFunctions, &revision);
  if (!records.ok()) {
    PHOS_LOG(Warn, "cluster", "the registry could not be listed: {}", records.status().message());
    return std::nullopt;
  }
  for (const cluster::KeyValue& kv : *records) {
    was_recorded.erase(kv.key.substr(std::string(kFunctions).size()));
    Follow(kv, false);
  }
  // Recorded when last seen, gone from the registry now: deleted while none watched.
  for (const auto& [name, deploy] : was_recorded) RemoveHere(name, deploy, "while this node was away");
  return revision + 1;  // every change after the listing
}

void ClusterNode::Follow(const cluster::KeyValue& kv, bool deleted) {
  const std::string name = kv.key.substr(std::string(kFunctions).size());
  {
    // A newer record of the name (or none): what failed to be adopted is no longer what is asked.
    // The record an adoption read may come by the watch after it: that one changes nothing.
    std::lock_guard lock(mu_);
    if (adopting_.count(name) != 0) {
      int64_t& newest = newest_revision_[name];
      newest = std::max(newest, kv.mod_revision);
    }
    if (auto failed = failed_.find(name); failed != failed_.end() && failed->second.revision < kv.mod_revision) {
      failed_.erase(failed);
    }
  }
  if (deleted) {
    // Removed on another node (or here: then it is gone already, and no longer recorded). What is
    // removed is what was recorded; a name not recorded here (removed here, perhaps deployed afresh
    // since) stays. Its note goes with the removal (RemoveHere), not before: a note of the
    // deploy still serving until then would bring it back.
    std::optional<DeployId> recorded;
    {
      std::lock_guard lock(mu_);
      if (auto it = recorded_.find(name); it != recorded_.end()) recorded = it->second;
    }
    if (recorded) RemoveHere(name, *recorded, "on another node");
    return;
  }
  Result<ClusterRecord> record = ParseClusterRecord(kv.value);
  if (!record.ok() || record->version.spec.name != name) {
    PHOS_LOG(Warn, "cluster", "the cluster's record of '{}' is ignored: {}", name,
             record.ok() ? "it names another function" : record.status().message());
    return;
  }
  // Only what this node serves follows at once; the rest is adopted when first invoked.
  const std::optional<DeployId> serving = Serving(name);
  if (serving) NoteRecorded(name);
  if (!serving || serving->number == record->version.number) return;
  Post([this, record = *record] {
    Adopt(record, [this, name = record.version.spec.name, number = record.version.number](Status adopted) {
      if (!adopted.ok()) {
        PHOS_LOG(Error, "cluster", "version {} of '{}' is not served here: {}", number, name, adopted.message());
        return;
      }
      NoteRecorded(name);  // the deploy a deletion of the record removes is now this one
    });
  });
}

void ClusterNode::WatchRegistry() {
  auto stopping = [this] {
    std::lock_guard lock(mu_);
    return stopping_;
  };
  while (!stopping()) {
    if (std::optional<int64_t> from = CatchUp()) {
      Status ended = etcd_.Watch(
          kFunctions, *from, [&](const cluster::KeyValue& kv, bool deleted) { Follow(kv, deleted); },
          [&] { return !stopping(); });
      if (stopping()) return;
      PHOS_LOG(Warn, "cluster", "the watch of the registry ended ({}); watching again", ended.message());
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; });
  }
}

}  // namespace phos::phosd
