// The instance manager's invocation metrics (Prometheus text for phosd's /metrics).
#include <fmt/core.h>

#include "instance_manager_impl.h"

namespace phos::runtime {

void InstanceManager::Impl::Record(const InvokeOutcome& out) {
  std::lock_guard lock(metrics_mu_);
  ++invocations_[out.mode];
  for (const auto& [stage, us] : out.stages) stage_sums_us_[{out.mode, stage}] += us;
  if (out.speculation_misses > 0) speculation_misses_ += static_cast<uint64_t>(out.speculation_misses);
}

std::string InstanceManager::Impl::MetricsText() const {
  std::lock_guard lock(metrics_mu_);
  std::string text =
      "# HELP phos_invocations_total Invocations answered, by how their instance was brought up.\n"
      "# TYPE phos_invocations_total counter\n";
  for (const auto& [mode, n] : invocations_) {
    text += fmt::format("phos_invocations_total{{mode=\"{}\"}} {}\n", RestoreModeName(mode), n);
  }
  text +=
      "# HELP phos_invocation_stage_seconds_sum Sum over invocations of the time from arrival to each stage.\n"
      "# TYPE phos_invocation_stage_seconds_sum counter\n";
  for (const auto& [key, us] : stage_sums_us_) {
    text += fmt::format("phos_invocation_stage_seconds_sum{{mode=\"{}\",stage=\"{}\"}} {:.6f}\n",
                        RestoreModeName(key.first), key.second, us / 1e6);
  }
  text +=
      "# HELP phos_speculation_misses_total Touches of buffers outside the speculated sets that validation caught.\n"
      "# TYPE phos_speculation_misses_total counter\n";
  text += fmt::format("phos_speculation_misses_total {}\n", speculation_misses_);
  return text;
}

}  // namespace phos::runtime
