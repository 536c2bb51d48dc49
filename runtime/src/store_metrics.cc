#include "store_metrics.h"

#include <utility>

#include "phos/base/log.h"

namespace phos::runtime {
namespace {

prometheus::Gauge& Gauge(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

StoreMetrics::StoreMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      logical_bytes_(Gauge(*registry_, "phos_store_logical_bytes",
                           "Bytes of buffers and modules summed over every stored snapshot, before dedup.")),
      unique_bytes_(Gauge(*registry_, "phos_store_unique_bytes",
                          "Raw bytes of the chunks some snapshot references: each shared chunk once.")),
      segment_bytes_(Gauge(*registry_, "phos_store_segment_bytes",
                           "Size of the store's segment files: what the disk holds, garbage included.")),
      snapshots_(Gauge(*registry_, "phos_store_snapshots", "Snapshots (function versions) stored.")),
      dram_pinned_bytes_(Gauge(*registry_, "phos_dram_tier_pinned_bytes",
                               "Bytes of the chunks the DRAM tier keeps pinned: each shared chunk once.")),
      dram_pinned_chunks_(Gauge(*registry_, "phos_dram_tier_pinned_chunks",
                                "Chunks the DRAM tier keeps pinned; each takes one slot of the arena.")) {}

void StoreMetrics::Refresh(store::Store& store, const store::DramTier* dram) {
  Result<store::StoreStats> stats = store.Stats();
  if (stats.ok()) {
    logical_bytes_.Set(static_cast<double>(stats->logical_bytes));
    unique_bytes_.Set(static_cast<double>(stats->unique_bytes));
    segment_bytes_.Set(static_cast<double>(stats->segment_bytes));
    snapshots_.Set(static_cast<double>(stats->snapshots));
  } else {
    PHOS_LOG(Warn, "snapshots", "store metrics not refreshed: {}", stats.status().message());
  }
  if (dram != nullptr) {
    store::DramTierStats tier = dram->Stats();
    dram_pinned_bytes_.Set(static_cast<double>(tier.pinned_bytes));
    dram_pinned_chunks_.Set(static_cast<double>(tier.pinned_chunks));
  }
}

}  // namespace phos::runtime
