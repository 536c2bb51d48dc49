// What the snapshot store and its DRAM tier hold, as gauges in the registry phosd serves at
// GET /metrics (README.md lists them): the bytes every snapshot names, the bytes stored once after
// chunk dedup, the disk's segment bytes, the snapshots, and the bytes and chunks the DRAM tier
// keeps pinned.
// Refreshed by SnapshotSessions whenever a snapshot is captured or versions are dropped, the only
// events that change them (so a scrape reads gauges, never the store).
#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <memory>

#include "phos/store/dram_tier.h"
#include "phos/store/store.h"

namespace phos::runtime {

class StoreMetrics {
 public:
  // Registers the gauges in `registry` (not null).
  explicit StoreMetrics(std::shared_ptr<prometheus::Registry> registry);

  // Reads Store::Stats (logged and skipped on failure) and, when `dram` is not null, its stats.
  void Refresh(store::Store& store, const store::DramTier* dram);

 private:
  const std::shared_ptr<prometheus::Registry> registry_;  // owns the gauges below
  prometheus::Gauge& logical_bytes_;
  prometheus::Gauge& unique_bytes_;
  prometheus::Gauge& segment_bytes_;
  prometheus::Gauge& snapshots_;
  prometheus::Gauge& dram_pinned_bytes_;
  prometheus::Gauge& dram_pinned_chunks_;
};

}  // namespace phos::runtime
