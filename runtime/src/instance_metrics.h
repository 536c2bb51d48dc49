// The instance manager's invocation metrics (docs/architecture.md "Metrics"), registered in the
// registry phosd serves at GET /metrics: invocations by how their instance was brought up, the
// time from arrival to each stage and the restores' waits (for a range, for a context) as
// histograms, the speculation misses validation caught, and how long instances take to end.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>

#include "phos/runtime/instance_manager.h"

namespace phos::runtime {

class InvocationMetrics {
 public:
  // Registers the families in `registry`, or in one of its own when it is null.
  explicit InvocationMetrics(std::shared_ptr<prometheus::Registry> registry);

  // Counts an answered invocation. Thread-safe.
  void Record(const InvokeOutcome& out);
  // An instance's end, from the moment it was asked to end until its range was scrubbed.
  void RecordRetire(double seconds);
  // An invocation refused because its function's queue was full (FunctionSpec::max_queue).
  void RecordOverload();

 private:
  const std::shared_ptr<prometheus::Registry> registry_;      // owns the families below
  prometheus::Family<prometheus::Counter>& invocations_;      // {mode}
  prometheus::Family<prometheus::Histogram>& stage_seconds_;  // {mode, stage}
  prometheus::Family<prometheus::Histogram>& wait_seconds_;   // {mode, wait}
  prometheus::Counter& speculation_misses_;
  prometheus::Histogram& retire_seconds_;
  prometheus::Counter& overloaded_;
};

}  // namespace phos::runtime
