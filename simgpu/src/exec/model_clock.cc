#include "exec/model_clock.h"

#include <cmath>
#include <thread>

#include "phos/base/log.h"

namespace phos::sim {

ModelClock::ModelClock(double time_scale) : time_scale_(time_scale) {
  if (!std::isfinite(time_scale) || time_scale <= 0) {
    PHOS_LOG(Warn, "simgpu", "time scale {} is not a positive number; using 1", time_scale);
    time_scale_ = 1.0;
  }
}

std::chrono::nanoseconds ModelClock::ToWall(double device_seconds) const {
  const double ns = device_seconds * time_scale_ * 1e9;
  if (!(ns > 0)) return std::chrono::nanoseconds(0);
  if (ns >= static_cast<double>(kMaxWall.count())) return kMaxWall;
  return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(ns)));
}

double ModelClock::ToDeviceSeconds(std::chrono::nanoseconds wall) const {
  return static_cast<double>(wall.count()) * 1e-9 / time_scale_;
}

void ModelClock::Pay(double device_seconds) const {
  const std::chrono::nanoseconds wall = ToWall(device_seconds);
  if (wall.count() > 0) std::this_thread::sleep_for(wall);
}

}  // namespace phos::sim
