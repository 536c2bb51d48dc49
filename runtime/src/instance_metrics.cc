#include "instance_metrics.h"

#include <utility>

#include "phos/base/latency_buckets.h"

namespace phos::runtime {
namespace {

std::shared_ptr<prometheus::Registry> OrOwn(std::shared_ptr<prometheus::Registry> registry) {
  return registry != nullptr ? std::move(registry) : std::make_shared<prometheus::Registry>();
}

// 1 ms to 100 s: a warm invocation answers in milliseconds, a phos restore's first byte in tens
// to hundreds of them, a cold boot in seconds (docs/benchmarks.md).
const std::vector<double>& StageBuckets() {
  static const std::vector<double> buckets = LatencyBuckets(1e-3, 100);
  return buckets;
}

// 10 µs to 100 s: a restore's waits are zero when capacity keeps up, a context creation when not.
const std::vector<double>& WaitBuckets() {
  static const std::vector<double> buckets = LatencyBuckets(1e-5, 100);
  return buckets;
}

}  // namespace

InvocationMetrics::InvocationMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(OrOwn(std::move(registry))),
      invocations_(prometheus::BuildCounter()
                       .Name("phos_invocations_total")
                       .Help("Invocations answered, by how their instance was brought up.")
                       .Register(*registry_)),
      stage_seconds_(prometheus::BuildHistogram()
                         .Name("phos_invocation_stage_seconds")
                         .Help("Time from an invocation's arrival to each stage, by mode and stage.")
                         .Register(*registry_)),
      wait_seconds_(prometheus::BuildHistogram()
                        .Name("phos_invocation_wait_seconds")
                        .Help("Time a restored instance's first invocation waited for an instance range or a context.")
                        .Register(*registry_)),
      speculation_misses_(prometheus::BuildCounter()
                              .Name("phos_speculation_misses_total")
                              .Help("Touches of buffers outside the speculated sets that validation caught.")
                              .Register(*registry_)
                              .Add({})),
      retire_seconds_(prometheus::BuildHistogram()
                          .Name("phos_instance_retire_seconds")
                          .Help("Time from an instance being asked to end to its range scrubbed and free again.")
                          .Register(*registry_)
                          .Add({}, LatencyBuckets(1e-4, 100))),
      overloaded_(prometheus::BuildCounter()
                      .Name("phos_invocations_refused_total")
                      .Help("Invocations refused at once because their function's queue was full (max_queue).")
                      .Register(*registry_)
                      .Add({})) {}

void InvocationMetrics::RecordOverload() { overloaded_.Increment(); }

void InvocationMetrics::Record(const InvokeOutcome& out) {
  std::string mode = RestoreModeName(out.mode);
  invocations_.Add({{"mode", mode}}).Increment();
  for (const auto& [stage, us] : out.stages) {
    stage_seconds_.Add({{"mode", mode}, {"stage", stage}}, StageBuckets()).Observe(static_cast<double>(us) / 1e6);
  }
  for (const auto& [wait, us] : out.waits) {
    wait_seconds_.Add({{"mode", mode}, {"wait", wait}}, WaitBuckets()).Observe(static_cast<double>(us) / 1e6);
  }
  if (out.speculation_misses > 0) speculation_misses_.Increment(static_cast<double>(out.speculation_misses));
}

void InvocationMetrics::RecordRetire(double seconds) { retire_seconds_.Observe(seconds); }

}  // namespace phos::runtime
