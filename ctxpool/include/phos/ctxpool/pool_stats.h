// What a pool (contexts or device groups) has done and holds, read back from the Prometheus
// metrics it registered (docs/ctxpool.md "Metrics"): the counters and gauges phosd's GET /metrics
// serves are the only record, and this is a typed view of them for tests and benchmarks.
#pragma once

#include <cstdint>

namespace phos::ctxpool {

struct PoolStats {
  // Lease() calls are hits (something was ready) or misses (nothing was: created on the
  // caller's thread, or waited for); `leases` counts those that returned something,
  // `lease_failures` those that returned an error.
  uint64_t leases = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t miss_waits = 0;  // misses that waited for a returned or refilled one
  uint64_t lease_failures = 0;
  uint64_t returns = 0;
  // Creations (by the refill or on a miss) and destructions of what the pool holds.
  uint64_t created = 0;
  uint64_t destroyed = 0;
  uint64_t create_failures = 0;
  uint64_t create_out_of_memory = 0;  // of create_failures, those the driver answered out of memory
  double create_seconds_total = 0;
  // Scrubs that made a returned one leasable again, and those that failed (it was destroyed).
  uint64_t scrubs = 0;
  uint64_t scrub_failures = 0;
  // Held now: ready to lease, leased, returned and waiting for or in the scrub, being created.
  uint64_t ready = 0;
  uint64_t leased = 0;
  uint64_t scrubbing = 0;
  uint64_t creating = 0;
};

}  // namespace phos::ctxpool
