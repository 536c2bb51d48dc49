#include "phos/runtime/snapshot_sessions.h"

#include <fmt/core.h>

#include <algorithm>

#include "phos/base/log.h"
#include "phos/store/manifest.h"
#include "store_metrics.h"

namespace phos::runtime {
namespace {

std::string PinKey(const std::string& function, uint64_t version) { return fmt::format("{}@{}", function, version); }

bool Ranked(const store::Manifest& m) {
  for (const store::Buffer& b : m.buffers) {
    if (b.first_touch_rank >= 0) return true;
  }
  return false;
}

}  // namespace

SnapshotSessions::SnapshotSessions(ApiServer* server, store::Store* store, DramTierFactory make_dram,
                                   SnapshotSessionsOptions options)
    : server_(server), store_(store), make_dram_(std::move(make_dram)), options_(std::move(options)) {
  if (options_.metrics_registry != nullptr) metrics_ = std::make_unique<StoreMetrics>(options_.metrics_registry);
}

SnapshotSessions::~SnapshotSessions() = default;

store::DramTier* SnapshotSessions::Dram() {
  std::call_once(dram_once_, [this] {
    if (!make_dram_) {
      PHOS_LOG(Info, "snapshots", "no DRAM tier: restores read the store");
      return;
    }
    Result<std::unique_ptr<store::DramTier>> made = make_dram_();
    if (!made.ok()) {
      PHOS_LOG(Warn, "snapshots", "no DRAM tier, restores read the store: {}", made.status().message());
      return;
    }
    dram_ = std::move(*made);
  });
  return dram_.get();
}

Result<uint64_t> SnapshotSessions::Capture(const std::string& token, const std::string& function,
                                           const CaptureOptions& capture) {
  // The order and the access classes go with the version before anyone is told it is committed:
  // a migration restores it at once.
  CaptureOptions options = capture;
  bool carried = false;
  if (capture.committed) {
    options.committed = [&](uint64_t version, const CaptureStats& copies) {
      CarryOverOrder(function, version);
      carried = true;
      capture.committed(version, copies);
    };
  }
  PHOS_ASSIGN_OR_RETURN(uint64_t version, server_->CaptureSession(token, *store_, function, options_.device_profile,
                                                                  options_.capture_timeout, options));
  if (!carried) CarryOverOrder(function, version);
  PHOS_ASSIGN_OR_RETURN(std::shared_ptr<const store::Manifest> manifest, Manifest(function, version));
  if (capture.keep_hot) Pin(*manifest);
  if (metrics_ != nullptr) metrics_->Refresh(*store_, Dram());
  uint64_t bytes = 0;
  for (const store::Buffer& b : manifest->buffers) bytes += b.size;
  PHOS_LOG(Info, "snapshots", "{} v{} captured: {} buffers, {} bytes, {} modules{}", function, version,
           manifest->buffers.size(), bytes, manifest->modules.size(),
           Ranked(*manifest) ? ", first-touch order kept" : "");
  return version;
}

Status SnapshotSessions::SameLayout(const std::string& function, uint64_t a, uint64_t b) {
  PHOS_ASSIGN_OR_RETURN(std::shared_ptr<const store::Manifest> x, Manifest(function, a));
  PHOS_ASSIGN_OR_RETURN(std::shared_ptr<const store::Manifest> y, Manifest(function, b));
  const std::string what = fmt::format("{} v{} and v{}", function, a, b);
  if (!x->device_profile.empty() && !y->device_profile.empty() && x->device_profile != y->device_profile) {
    return Status::FailedPrecondition(fmt::format("{} were taken on different kinds of device ({} and {})", what,
                                                  x->device_profile, y->device_profile));
  }
  if (x->va_base != y->va_base || x->va_bytes != y->va_bytes || x->gpus != y->gpus) {
    return Status::FailedPrecondition(what + " lie in different instance ranges or device counts");
  }
  if (x->buffers.size() != y->buffers.size()) {
    return Status::FailedPrecondition(
        fmt::format("{} hold {} and {} buffers", what, x->buffers.size(), y->buffers.size()));
  }
  for (size_t i = 0; i < x->buffers.size(); ++i) {
    const store::Buffer& p = x->buffers[i];
    const store::Buffer& q = y->buffers[i];
    if (p.device_address != q.device_address || p.size != q.size || p.device != q.device) {
      return Status::FailedPrecondition(fmt::format("{}: buffer {} is {:#x} (+{}) in one and {:#x} (+{}) in the other",
                                                    what, i, p.device_address, p.size, q.device_address, q.size));
    }
  }
  return Status::Ok();
}

uint64_t SnapshotSessions::SnapshotBytes(const std::string& function, uint64_t version) {
  Result<std::shared_ptr<const store::Manifest>> manifest = Manifest(function, version);
  if (!manifest.ok()) return 0;
  uint64_t bytes = 0;
  for (const store::Buffer& b : (*manifest)->buffers) bytes += b.size;
  return bytes;
}

Result<std::shared_ptr<const store::Manifest>> SnapshotSessions::Manifest(const std::string& function,
                                                                          uint64_t version) {
  std::lock_guard lock(mu_);
  Key key{function, version};
  if (auto it = manifests_.find(key); it != manifests_.end()) return it->second;
  PHOS_ASSIGN_OR_RETURN(store::Manifest m, store_->LoadManifest(function, version));
  auto shared = std::make_shared<const store::Manifest>(std::move(m));
  manifests_[key] = shared;
  return shared;
}

void SnapshotSessions::Stage(const std::string& function, uint64_t version) {
  Result<std::shared_ptr<const store::Manifest>> manifest = Manifest(function, version);
  if (manifest.ok()) Pin(**manifest);
}

void SnapshotSessions::Pin(const store::Manifest& manifest) {
  store::DramTier* dram = Dram();
  if (dram == nullptr) return;
  std::vector<store::ChunkRef> chunks;
  for (const store::Buffer& b : manifest.buffers)
    chunks.insert(chunks.end(), b.chunks.begin(), b.chunks.end());
  Status pinned = dram->Pin(PinKey(manifest.function, manifest.version), chunks);
  if (!pinned.ok()) {
    // Restores still work, reading what is not in the tier from the store.
    PHOS_LOG(Warn, "snapshots", "{} v{} not pinned in the DRAM tier: {}", manifest.function, manifest.version,
             pinned.message());
  }
}

void SnapshotSessions::Unpin(const std::string& function, uint64_t version) {
  if (store::DramTier* dram = Dram()) dram->Unpin(PinKey(function, version)).IgnoreError();
}

void SnapshotSessions::CarryOverOrder(const std::string& function, uint64_t version) {
  Result<std::vector<uint64_t>> versions = store_->ListVersions(function);
  if (!versions.ok() || versions->size() < 2) return;
  uint64_t previous = 0;
  for (uint64_t v : *versions) {
    if (v < version) previous = std::max(previous, v);
  }
  if (previous == 0) return;
  Result<store::Manifest> old = store_->LoadManifest(function, previous);
  Result<store::Manifest> now = store_->LoadManifest(function, version);
  if (!old.ok() || !now.ok() || !Ranked(*old) || old->buffers.size() != now->buffers.size()) return;
  std::vector<int32_t> ranks;
  std::vector<store::AccessClass> classes;
  for (size_t i = 0; i < old->buffers.size(); ++i) {
    if (old->buffers[i].size != now->buffers[i].size) return;
    ranks.push_back(old->buffers[i].first_touch_rank);
    classes.push_back(old->buffers[i].access_class);
  }
  Status s = store_->SetFirstTouchOrder(function, version, ranks);
  if (s.ok()) s = store_->SetAccessClasses(function, version, classes);
  if (!s.ok()) PHOS_LOG(Warn, "snapshots", "{} v{}: first-touch order of v{} not carried over: {}", function, version, previous, s.message());
}

void SnapshotSessions::RetainOnly(const std::string& function, const std::vector<uint64_t>& keep) {
  Result<std::vector<uint64_t>> versions = store_->ListVersions(function);
  if (!versions.ok()) return;
  for (uint64_t v : *versions) {
    if (std::find(keep.begin(), keep.end(), v) != keep.end()) continue;
    Unpin(function, v);
    {
      std::lock_guard lock(mu_);
      manifests_.erase({function, v});
    }
    Status s = store_->DeleteVersion(function, v);
    if (!s.ok()) PHOS_LOG(Warn, "snapshots", "{} v{} not deleted: {}", function, v, s.message());
  }
  Result<store::GcStats> gc = store_->CollectGarbage();
  if (!gc.ok()) PHOS_LOG(Warn, "snapshots", "garbage collection: {}", gc.status().message());
  if (metrics_ != nullptr) metrics_->Refresh(*store_, Dram());
}

Result<std::string> SnapshotSessions::IssueRestoreToken(const RestoreRequest& r) {
  SessionPlan plan;
  plan.function = r.function;
  plan.gpus = r.gpus;
  plan.urgent = r.urgent;
  plan.device = r.device;
  if (r.mode != RestoreMode::kColdBoot) plan.va_slot = r.va_slot;
  plan.fresh_context =
      r.mode == RestoreMode::kColdBoot || r.mode == RestoreMode::kStopTheWorld || r.mode == RestoreMode::kNoPool;
  if (r.mode != RestoreMode::kColdBoot && r.version != 0) {
    PHOS_ASSIGN_OR_RETURN(plan.manifest, Manifest(r.function, r.version));
    // Any device of the kind it was taken on (the instance ranges are the daemon's, not a
    // device's); another kind (memory, compute capability) is refused, naming both.
    if (!plan.manifest->device_profile.empty() && !options_.device_profile.empty() &&
        plan.manifest->device_profile != options_.device_profile) {
      return Status::FailedPrecondition(fmt::format(
          "{} v{} was taken on a {}; this node's devices are {}: a snapshot restores on devices of the kind it was "
          "taken on",
          r.function, r.version, plan.manifest->device_profile, options_.device_profile));
    }
    store::DramTier* dram = Dram();
    plan.source = dram != nullptr ? static_cast<store::ChunkSource*>(dram) : store_;
    plan.dram = dram;
    plan.stop_the_world = r.mode == RestoreMode::kStopTheWorld || r.mode == RestoreMode::kEager;
    plan.first_touch_order = r.mode != RestoreMode::kNoOrder;
    plan.learn_first_touch = r.learn;
  }
  return server_->IssueToken(std::move(plan));
}

Status SnapshotSessions::WaitPrepared(const std::string& token, std::chrono::milliseconds timeout) {
  return server_->WaitPrepared(token, timeout);
}

SessionTimeline SnapshotSessions::Timeline(const std::string& token) {
  Result<SessionTimeline> t = server_->Timeline(token);
  return t.ok() ? *t : SessionTimeline{};
}

bool SnapshotSessions::HasFirstTouch(const std::string& function, uint64_t version) {
  Result<std::shared_ptr<const store::Manifest>> m = Manifest(function, version);
  return m.ok() && ((*m)->buffers.empty() || Ranked(**m));
}

bool SnapshotSessions::SaveFirstTouch(const std::string& token, const std::string& function,
                                      const std::vector<uint64_t>& versions) {
  // Misses: a call touched a buffer its speculated sets did not name, so the sets this session
  // saw do not tell which buffers were written: none is classed read-only.
  const bool missed = Timeline(token).misses > 0;
  LearnedUsage usage = server_->TakeLearnedUsage(token);
  const std::vector<int32_t>& ranks = usage.first_touch;
  if (ranks.empty()) return false;
  int touched = 0;
  int read_only = 0;
  std::vector<store::AccessClass> classes;
  for (size_t i = 0; i < ranks.size(); ++i) {
    touched += ranks[i] >= 0 ? 1 : 0;
    // A buffer no call named is not known to be read-only: a later request may write it.
    store::AccessClass c = store::AccessClass::kUnknown;
    if (i < usage.written.size() && usage.written[i]) {
      c = store::AccessClass::kReadWrite;
    } else if (ranks[i] >= 0 && !missed) {
      c = store::AccessClass::kReadOnly;
      ++read_only;
    }
    classes.push_back(c);
  }
  bool saved = false;
  for (uint64_t version : versions) {
    Status s = store_->SetFirstTouchOrder(function, version, ranks);
    if (s.ok()) s = store_->SetAccessClasses(function, version, classes);
    if (!s.ok()) {
      PHOS_LOG(Warn, "snapshots", "{} v{}: learned first-touch order not saved: {}", function, version, s.message());
      continue;
    }
    saved = true;
    {
      std::lock_guard lock(mu_);
      manifests_.erase({function, version});  // reloaded with the order on the next restore
    }
    PHOS_LOG(Info, "snapshots", "{} v{}: first-touch order learned ({} of {} buffers touched, {} read-only)",
             function, version, touched, ranks.size(), read_only);
  }
  return saved;
}

}  // namespace phos::runtime
