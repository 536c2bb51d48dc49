// What the simulated device's engines did, as counters in the registry phosd serves at GET /metrics,
// when the driver is simgpu (docs/guide.md, "Metrics"): per device and engine (h2d, d2h, compute),
// the operations with a modelled cost and those of them whose real work on the host took longer
// than the model allowed. A run with many host-bound operations measured the host, not the
// modelled device (simgpu/README.md); which engine says which part of it. Read from
// phosSimGetEngineStats at each scrape.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "phos/driver/driver_table.h"

namespace phos::phosd {

class SimgpuMetrics {
 public:
  // Null when `driver` is not simgpu's (no phosSimGetEngineStats) or has no device.
  static std::unique_ptr<SimgpuMetrics> Create(std::shared_ptr<driver::DriverTable> driver, int devices,
                                               prometheus::Registry& registry);

  // Brings the counters up to what the devices report now. Thread-safe.
  void Refresh();

 private:
  // One engine's pair of counters, and the device's counts they stand at.
  struct Count {
    prometheus::Counter* counter = nullptr;
    unsigned long long seen = 0;
  };
  static constexpr int kEngines = 3;  // h2d, d2h, compute
  struct Device {
    std::array<Count, kEngines> paced;
    std::array<Count, kEngines> host_bound;
  };
  SimgpuMetrics(std::shared_ptr<driver::DriverTable> driver, std::vector<Device> devices)
      : driver_(std::move(driver)), devices_(std::move(devices)) {}

  const std::shared_ptr<driver::DriverTable> driver_;
  std::mutex mu_;
  std::vector<Device> devices_;  // by ordinal
};

}  // namespace phos::phosd
