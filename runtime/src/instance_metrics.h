// The instance manager's invocation metrics (docs/architecture.md "Metrics"), registered in the
// registry phosd serves at GET /metrics: invocations by how their instance was brought up, the
// time from arrival to each stage as histograms, and the speculation misses validation caught.
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

 private:
  const std::shared_ptr<prometheus::Registry> registry_;      // owns the families below
  prometheus::Family<prometheus::Counter>& invocations_;      // {mode}
  prometheus::Family<prometheus::Histogram>& stage_seconds_;  // {mode, stage}
  prometheus::Counter& speculation_misses_;
};

}  // namespace phos::runtime
