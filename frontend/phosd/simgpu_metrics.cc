#include "simgpu_metrics.h"

#include <string>

namespace phos::phosd {

std::unique_ptr<SimgpuMetrics> SimgpuMetrics::Create(std::shared_ptr<driver::DriverTable> driver, int devices,
                                                     prometheus::Registry& registry) {
  if (driver == nullptr || driver->phosSimGetStats == nullptr || devices <= 0) return nullptr;
  auto& paced = prometheus::BuildCounter()
                    .Name("phos_simgpu_paced_ops_total")
                    .Help("Operations of the simulated device with a modelled cost (copies, memsets, kernels).")
                    .Register(registry);
  auto& host_bound = prometheus::BuildCounter()
                         .Name("phos_simgpu_host_bound_ops_total")
                         .Help("Operations of the simulated device whose real work on the host took longer than "
                               "their modelled cost: time the host, not the model, decided.")
                         .Register(registry);
  std::vector<Device> by_device(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    const prometheus::Labels labels{{"device", std::to_string(d)}};
    by_device[d].paced = &paced.Add(labels);
    by_device[d].host_bound = &host_bound.Add(labels);
  }
  return std::unique_ptr<SimgpuMetrics>(new SimgpuMetrics(std::move(driver), std::move(by_device)));
}

void SimgpuMetrics::Refresh() {
  std::lock_guard lock(mu_);
  for (size_t d = 0; d < devices_.size(); ++d) {
    PhosSimStats stats{};
    if (driver_->phosSimGetStats(static_cast<CUdevice>(d), &stats) != CUDA_SUCCESS) continue;
    Device& device = devices_[d];
    // The device's counts only grow, but phosSimResetStats (a test's) starts them over: a count
    // below the last one is all new.
    auto advance = [](prometheus::Counter* counter, unsigned long long now, unsigned long long* seen) {
      counter->Increment(static_cast<double>(now >= *seen ? now - *seen : now));
      *seen = now;
    };
    advance(device.paced, stats.paced_ops, &device.paced_seen);
    advance(device.host_bound, stats.host_bound_ops, &device.host_bound_seen);
  }
}

}  // namespace phos::phosd
