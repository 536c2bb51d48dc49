// What a context pool reports (docs/design.md D11: "metrics exported"): a plain struct, and the same
// numbers as Prometheus text exposition lines for phosd's GET /metrics.
#pragma once

#include <cstdint>
#include <string>

namespace phos::ctxpool {

struct PoolMetrics {
  int device = 0;
  // Lease() calls are hits (a context was ready) or misses (none was: created synchronously, or
  // waited for at the maximum); `leases` counts those that returned a context, `lease_failures`
  // those that returned an error (creation failed on a miss, or the wait timed out).
  uint64_t leases = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t miss_waits = 0;  // misses that waited for a returned context rather than creating one
  uint64_t lease_failures = 0;
  uint64_t returns = 0;
  // Lease() latency over the most recent leases (PoolOptions::latency_window), in microseconds.
  double lease_p50_us = 0;
  double lease_p99_us = 0;
  // Creation of a context plus its cuBLAS handle, by the refill or by a miss.
  uint64_t contexts_created = 0;
  uint64_t contexts_destroyed = 0;
  uint64_t create_failures = 0;
  uint64_t create_out_of_memory = 0;  // of create_failures, those the driver answered out of memory
  double create_seconds_total = 0;
  double create_seconds_last = 0;
  // Scrubs completed, scrubs that failed (the context was destroyed), and their total time.
  uint64_t scrubs = 0;
  uint64_t scrub_failures = 0;
  double scrub_seconds_total = 0;
  // Contexts now: ready to lease, leased, waiting for or in the scrub, being created.
  uint64_t ready = 0;
  uint64_t leased = 0;
  uint64_t scrubbing = 0;
  uint64_t creating = 0;
};

// Prometheus text exposition (version 0.0.4) of `m`: HELP and TYPE lines, then one sample per
// figure, labelled device="N". Several pools' texts concatenate into one valid page only when
// `with_help` is set for the first and not the others.
std::string ToPrometheusText(const PoolMetrics& m, bool with_help = true);

}  // namespace phos::ctxpool
