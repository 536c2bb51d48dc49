#include "phos/ctxpool/pool_metrics.h"

#include <fmt/core.h>

namespace phos::ctxpool {
namespace {

struct Line {
  std::string out;
  int device;
  bool help;

  void Family(const char* name, const char* type, const char* help_text) {
    if (!help) return;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help_text, name, type);
  }
  void Sample(const char* name, double value, const char* extra_label = nullptr) {
    if (extra_label != nullptr) {
      out += fmt::format("{}{{device=\"{}\",{}}} {}\n", name, device, extra_label, value);
    } else {
      out += fmt::format("{}{{device=\"{}\"}} {}\n", name, device, value);
    }
  }
  void Metric(const char* name, const char* type, const char* help_text, double value) {
    Family(name, type, help_text);
    Sample(name, value);
  }
};

}  // namespace

std::string ToPrometheusText(const PoolMetrics& m, bool with_help) {
  Line l{{}, m.device, with_help};
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  l.Metric("phos_ctxpool_leases_total", "counter", "Context leases granted.", d(m.leases));
  l.Metric("phos_ctxpool_lease_hits_total", "counter", "Leases served by a ready context.", d(m.hits));
  l.Metric("phos_ctxpool_lease_misses_total", "counter", "Leases that found no ready context.", d(m.misses));
  l.Metric("phos_ctxpool_lease_miss_waits_total", "counter",
           "Misses that waited for a returned context at the maximum.", d(m.miss_waits));
  l.Metric("phos_ctxpool_lease_failures_total", "counter", "Lease calls that failed.", d(m.lease_failures));
  l.Metric("phos_ctxpool_returns_total", "counter", "Leases returned.", d(m.returns));
  l.Family("phos_ctxpool_lease_latency_seconds", "summary", "Lease call latency over the recent window.");
  l.Sample("phos_ctxpool_lease_latency_seconds", m.lease_p50_us * 1e-6, "quantile=\"0.5\"");
  l.Sample("phos_ctxpool_lease_latency_seconds", m.lease_p99_us * 1e-6, "quantile=\"0.99\"");
  l.Metric("phos_ctxpool_contexts_created_total", "counter", "Contexts (with their cuBLAS handle) created.",
           d(m.contexts_created));
  l.Metric("phos_ctxpool_contexts_destroyed_total", "counter", "Contexts destroyed.",
           d(m.contexts_destroyed));
  l.Metric("phos_ctxpool_create_failures_total", "counter", "Context creations that failed.",
           d(m.create_failures));
  l.Metric("phos_ctxpool_create_out_of_memory_total", "counter",
           "Context creations that failed out of device memory.", d(m.create_out_of_memory));
  l.Family("phos_ctxpool_create_seconds", "summary", "Time to create a context and its cuBLAS handle.");
  l.Sample("phos_ctxpool_create_seconds_sum", m.create_seconds_total);
  l.Sample("phos_ctxpool_create_seconds_count", d(m.contexts_created));
  l.Metric("phos_ctxpool_create_seconds_last", "gauge", "Time the most recent context creation took.",
           m.create_seconds_last);
  l.Metric("phos_ctxpool_scrubs_total", "counter", "Returned contexts scrubbed and made leasable again.",
           d(m.scrubs));
  l.Metric("phos_ctxpool_scrub_failures_total", "counter", "Scrubs that failed; the context was destroyed.",
           d(m.scrub_failures));
  l.Metric("phos_ctxpool_scrub_seconds_total", "counter", "Time spent scrubbing.", m.scrub_seconds_total);
  l.Family("phos_ctxpool_contexts", "gauge", "Contexts held by the pool, by state.");
  l.Sample("phos_ctxpool_contexts", d(m.ready), "state=\"ready\"");
  l.Sample("phos_ctxpool_contexts", d(m.leased), "state=\"leased\"");
  l.Sample("phos_ctxpool_contexts", d(m.scrubbing), "state=\"scrubbing\"");
  l.Sample("phos_ctxpool_contexts", d(m.creating), "state=\"creating\"");
  return std::move(l.out);
}

}  // namespace phos::ctxpool
