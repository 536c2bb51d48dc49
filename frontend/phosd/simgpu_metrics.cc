#include "simgpu_metrics.h"

#include <string>

namespace phos::phosd {
namespace {

constexpr const char* kEngineNames[] = {"h2d", "d2h", "compute"};

}  // namespace

std::unique_ptr<SimgpuMetrics> SimgpuMetrics::Create(std::shared_ptr<driver::DriverTable> driver, int devices,
                                                     prometheus::Registry& registry) {
  if (driver == nullptr || driver->phosSimGetEngineStats == nullptr || devices <= 0) return nullptr;
  auto& paced = prometheus::BuildCounter()
                    .Name("phos_simgpu_paced_ops_total")
                    .Help("Operations of the simulated device with a modelled cost, by engine: h2d and d2h "
                          "copies, compute (kernels, memsets, device-to-device copies).")
                    .Register(registry);
  auto& host_bound = prometheus::BuildCounter()
                         .Name("phos_simgpu_host_bound_ops_total")
                         .Help("Operations of the simulated device whose real work on the host took longer than "
                               "their modelled cost, by engine: time the host, not the model, decided.")
                         .Register(registry);
  std::vector<Device> by_device(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    for (int e = 0; e < kEngines; ++e) {
      const prometheus::Labels labels{{"device", std::to_string(d)}, {"engine", kEngineNames[e]}};
      by_device[d].paced[e].counter = &paced.Add(labels);
      by_device[d].host_bound[e].counter = &host_bound.Add(labels);
    }
  }
  return std::unique_ptr<SimgpuMetrics>(new SimgpuMetrics(std::move(driver), std::move(by_device)));
}

void SimgpuMetrics::Refresh() {
  std::lock_guard lock(mu_);
  for (size_t d = 0; d < devices_.size(); ++d) {
    PhosSimEngineStats stats{};
    if (driver_->phosSimGetEngineStats(static_cast<CUdevice>(d), &stats) != CUDA_SUCCESS) continue;
    // The device's counts only grow, but phosSimResetStats (a test's) starts them over: a count
    // below the last one is all new.
    auto advance = [](Count& count, unsigned long long now) {
      count.counter->Increment(static_cast<double>(now >= count.seen ? now - count.seen : now));
      count.seen = now;
    };
    Device& device = devices_[d];
    const unsigned long long paced[kEngines] = {stats.h2d_ops, stats.d2h_ops, stats.compute_ops};
    const unsigned long long bound[kEngines] = {stats.h2d_host_bound_ops, stats.d2h_host_bound_ops,
                                                stats.compute_host_bound_ops};
    for (int e = 0; e < kEngines; ++e) {
      advance(device.paced[e], paced[e]);
      advance(device.host_bound[e], bound[e]);
    }
  }
}

}  // namespace phos::phosd
