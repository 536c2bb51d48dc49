#include "pool_instruments.h"

#include <cstdint>

#include "phos/base/latency_buckets.h"

namespace phos::ctxpool::detail {
namespace {

prometheus::Counter& AddCounter(prometheus::Registry& registry, const PoolMetricNames& names,
                                const std::string& name, const std::string& help) {
  return prometheus::BuildCounter()
      .Name(names.prefix + "_" + name)
      .Help(help)
      .Register(registry)
      .Add(names.labels);
}

prometheus::Histogram& AddHistogram(prometheus::Registry& registry, const PoolMetricNames& names,
                                    const std::string& name, const std::string& help, double from,
                                    double to) {
  return prometheus::BuildHistogram()
      .Name(names.prefix + "_" + name)
      .Help(help)
      .Register(registry)
      .Add(names.labels, LatencyBuckets(from, to));
}

prometheus::Gauge& AddHeld(prometheus::Registry& registry, const PoolMetricNames& names, const char* state) {
  prometheus::Labels labels = names.labels;
  labels["state"] = state;
  return prometheus::BuildGauge()
      .Name(names.prefix + "_" + names.items)
      .Help("Held by the pool now, by state (ready, leased, scrubbing, creating).")
      .Register(registry)
      .Add(labels);
}

uint64_t Count(const prometheus::Counter& counter) {
  return static_cast<uint64_t>(counter.Value());
}

}  // namespace

PoolInstruments::PoolInstruments(prometheus::Registry& registry, const PoolMetricNames& names)
    : leases(AddCounter(registry, names, "leases_total", "Leases granted.")),
      hits(AddCounter(registry, names, "lease_hits_total", "Leases served by a ready one.")),
      misses(AddCounter(registry, names, "lease_misses_total", "Leases that found none ready.")),
      miss_waits(AddCounter(registry, names, "lease_miss_waits_total",
                            "Misses that waited for a returned or refilled one.")),
      lease_failures(AddCounter(registry, names, "lease_failures_total", "Lease calls that failed.")),
      returns(AddCounter(registry, names, "returns_total", "Leases returned.")),
      created(AddCounter(registry, names, names.items + "_created_total",
                         "Created, by the refill or on a miss.")),
      destroyed(AddCounter(registry, names, names.items + "_destroyed_total", "Destroyed.")),
      create_failures(AddCounter(registry, names, "create_failures_total", "Creations that failed.")),
      create_out_of_memory(AddCounter(registry, names, "create_out_of_memory_total",
                                      "Creations that failed out of device memory.")),
      scrubs(AddCounter(registry, names, "scrubs_total", "Returned ones scrubbed and made leasable again.")),
      scrub_failures(AddCounter(registry, names, "scrub_failures_total",
                                "Scrubs that failed; what failed it was destroyed.")),
      lease_seconds(AddHistogram(registry, names, "lease_latency_seconds", "Lease call latency.", 1e-6, 100)),
      create_seconds(AddHistogram(registry, names, "create_seconds", "Time one creation took.", 1e-3, 1000)),
      scrub_seconds(AddHistogram(registry, names, "scrub_seconds", "Time one scrub took.", 1e-5, 100)),
      ready_(AddHeld(registry, names, "ready")),
      leased_(AddHeld(registry, names, "leased")),
      scrubbing_(AddHeld(registry, names, "scrubbing")),
      creating_(AddHeld(registry, names, "creating")) {}

PoolStats PoolInstruments::Counts() const {
  PoolStats s;
  s.leases = Count(leases);
  s.hits = Count(hits);
  s.misses = Count(misses);
  s.miss_waits = Count(miss_waits);
  s.lease_failures = Count(lease_failures);
  s.returns = Count(returns);
  s.created = Count(created);
  s.destroyed = Count(destroyed);
  s.create_failures = Count(create_failures);
  s.create_out_of_memory = Count(create_out_of_memory);
  s.create_seconds_total = create_seconds.Collect().histogram.sample_sum;
  s.scrubs = Count(scrubs);
  s.scrub_failures = Count(scrub_failures);
  return s;
}

void PoolInstruments::SetHeld(uint64_t ready, uint64_t leased, uint64_t scrubbing, uint64_t creating) {
  ready_.Set(static_cast<double>(ready));
  leased_.Set(static_cast<double>(leased));
  scrubbing_.Set(static_cast<double>(scrubbing));
  creating_.Set(static_cast<double>(creating));
}

}  // namespace phos::ctxpool::detail
