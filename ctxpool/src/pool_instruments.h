// The Prometheus families a pool registers (docs/ctxpool.md "Metrics"): counters of leases,
// creations and scrubs, histograms of the lease, creation and scrub times, and a gauge of what is
// held by state. The context pool registers them as phos_ctxpool_* labelled by device, the
// communicator pool as phos_devgroup_*; pools sharing a registry and a prefix share the families.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <string>

#include "phos/ctxpool/pool_stats.h"

namespace phos::ctxpool::detail {

struct PoolMetricNames {
  std::string prefix;  // "phos_ctxpool": every family's name starts with it
  std::string items;   // "contexts": what the pool holds, in the names of the created/destroyed families
  prometheus::Labels labels;  // on every series of this pool: {device="0"}
};

class PoolInstruments {
 public:
  PoolInstruments(prometheus::Registry& registry, const PoolMetricNames& names);

  // The counters and histograms, read back; the held-now figures are the caller's.
  PoolStats Counts() const;
  void SetHeld(uint64_t ready, uint64_t leased, uint64_t scrubbing, uint64_t creating);

  prometheus::Counter& leases;
  prometheus::Counter& hits;
  prometheus::Counter& misses;
  prometheus::Counter& miss_waits;
  prometheus::Counter& lease_failures;
  prometheus::Counter& returns;
  prometheus::Counter& created;
  prometheus::Counter& destroyed;
  prometheus::Counter& create_failures;
  prometheus::Counter& create_out_of_memory;
  prometheus::Counter& scrubs;
  prometheus::Counter& scrub_failures;
  prometheus::Histogram& lease_seconds;
  prometheus::Histogram& create_seconds;
  prometheus::Histogram& scrub_seconds;

 private:
  prometheus::Gauge& ready_;
  prometheus::Gauge& leased_;
  prometheus::Gauge& scrubbing_;
  prometheus::Gauge& creating_;
};

}  // namespace phos::ctxpool::detail
