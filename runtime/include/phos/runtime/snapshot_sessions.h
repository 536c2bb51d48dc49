// GPU sessions with snapshots (docs/design.md D5, D6, D7): the instance manager's GpuSessions over the API
// server, the snapshot store and its DRAM tier. phosd runs instances through it.
//
// - Capture: the API server captures the session into the store; the order learned for the
//   function's previous snapshot is carried over when its buffers are laid out alike; the new
//   snapshot is pinned in the DRAM tier (restores read from pinned memory). Versions other than
//   those the instance manager keeps (RetainOnly) are deleted.
// - IssueRestoreToken: a SessionPlan for the mode (runtime/restore_mode.h) over the cached
//   manifest, chunks through the DRAM tier.
// - First-touch order and access classes: a restored session learns them
//   (SessionPlan::learn_first_touch) and SaveFirstTouch persists them with the snapshot
//   (Store::SetFirstTouchOrder, Store::SetAccessClasses).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <prometheus/registry.h>

#include "phos/runtime/api_server.h"
#include "phos/runtime/instance_manager.h"
#include "phos/store/dram_tier.h"
#include "phos/store/store.h"

namespace phos::runtime {

struct SnapshotSessionsOptions {
  // Named in manifests ("a100-pcie4", or the GPU's name). Default: empty.
  std::string device_profile;
  // How long a capture waits for the function's calls to drain. Default: 60 s.
  std::chrono::milliseconds capture_timeout{60000};
  // Where the store's and DRAM tier's sizes are published as gauges (store_metrics.h), refreshed
  // after each capture and each drop of versions. Default: null, none published.
  std::shared_ptr<prometheus::Registry> metrics_registry;
};

class StoreMetrics;

class SnapshotSessions final : public GpuSessions {
 public:
  // Makes the DRAM tier in front of the store; called once, when the first snapshot is captured or
  // restored (its pinned arena needs a context, which phosd should not wait for at start).
  using DramTierFactory = std::function<Result<std::unique_ptr<store::DramTier>>()>;
  // `server` and `store` must outlive this. Without a factory, or when it fails (logged), chunks
  // are read from the store.
  SnapshotSessions(ApiServer* server, store::Store* store, DramTierFactory make_dram, SnapshotSessionsOptions options);
  ~SnapshotSessions() override;

  std::string IssueToken(int gpus, const std::string& function) override {
    return server_->IssueToken(gpus, function);
  }
  // Unused after ten minutes (a program may compute a while before its first CUDA call), forgotten.
  std::string IssueExternalToken(int gpus) override { return server_->IssueToken(gpus, std::chrono::minutes(10)); }
  void EndSession(const std::string& token) override { server_->EndSession(token); }
  void MarkMoving(const std::string& token) override { server_->MarkMoving(token); }
  void SetFunctionLimits(const std::string& function, const FunctionSpec::Limits& limits) override {
    server_->SetFunctionQuota(function, {.device_bytes = static_cast<uint64_t>(limits.session_device_mib) << 20,
                                         .buffers = static_cast<size_t>(limits.session_buffers),
                                         .handles = static_cast<size_t>(limits.session_handles),
                                         .module_bytes = static_cast<uint64_t>(limits.session_module_mib) << 20});
  }
  std::string SocketPath() const override { return server_->socket_path(); }
  int DeviceCount() const override { return server_->device_count(); }
  int DefaultDevice() const override { return server_->default_device(); }

  bool SupportsSnapshots() const override { return true; }
  Result<int> ClaimVaSlot() override { return server_->ClaimVaSlot(); }
  Result<int> ClaimVaSlotAt(int slot) override { return server_->ClaimVaSlot(slot); }
  Status SameLayout(const std::string& function, uint64_t a, uint64_t b) override;
  // Pinned in the DRAM tier, as a capture's snapshot is.
  void Stage(const std::string& function, uint64_t version) override;
  void ReleaseVaSlot(int slot) override { server_->ReleaseVaSlot(slot); }
  Result<uint64_t> Capture(const std::string& token, const std::string& function,
                           const CaptureOptions& options) override;
  uint64_t SnapshotBytes(const std::string& function, uint64_t version) override;
  Result<std::string> IssueRestoreToken(const RestoreRequest& request) override;
  Status WaitPrepared(const std::string& token, std::chrono::milliseconds timeout) override;
  SessionTimeline Timeline(const std::string& token) override;
  bool HasFirstTouch(const std::string& function, uint64_t version) override;
  bool SaveFirstTouch(const std::string& token, const std::string& function,
                      const std::vector<uint64_t>& versions) override;
  void RetainOnly(const std::string& function, const std::vector<uint64_t>& keep) override;
  void SetContextDemand(size_t contexts) override { server_->SetContextDemand(contexts); }
  bool WaitForContexts(std::chrono::milliseconds timeout, const std::function<bool()>& stopping) override {
    return server_->WaitForContexts(timeout, stopping);
  }

 private:
  using Key = std::pair<std::string, uint64_t>;
  Result<std::shared_ptr<const store::Manifest>> Manifest(const std::string& function, uint64_t version);
  // The DRAM tier, made on first use; null when there is none.
  store::DramTier* Dram();
  void Pin(const store::Manifest& manifest);
  void Unpin(const std::string& function, uint64_t version);
  // The previous snapshot's order and access classes, when `manifest`'s buffers match it in
  // number and size.
  void CarryOverOrder(const std::string& function, uint64_t version);


  ApiServer* server_;
  store::Store* store_;
  DramTierFactory make_dram_;
  std::once_flag dram_once_;
  std::unique_ptr<store::DramTier> dram_;
  SnapshotSessionsOptions options_;
  std::unique_ptr<StoreMetrics> metrics_;  // null without options_.metrics_registry
  std::mutex mu_;
  std::map<Key, std::shared_ptr<const store::Manifest>> manifests_;
};

}  // namespace phos::runtime
