// The model clock: converts modelled device time into wall time on this host.
//
// A device profile gives costs in device seconds (a 256 MiB copy at 25 GB/s takes 10.7 ms). The
// time scale multiplies every modelled cost, so that with scale 10 that copy holds its engine for
// 107 ms of wall time. Benchmarks pick a scale large enough that the modelled device, not this
// host's memcpy (a few GB/s, ~2 GB/s into freshly touched pages), bounds their results
// (docs/decisions.md, "Default time scale 10").
#pragma once

#include <chrono>
#include <cstdint>

namespace phos::sim {

using WallClock = std::chrono::steady_clock;

// The wall clock in nanoseconds, as the engines and the watchdog time their work.
inline int64_t WallNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(WallClock::now().time_since_epoch()).count();
}

class ModelClock {
 public:
  // `time_scale`: wall seconds per modelled device second. A value that is not finite and
  // positive is replaced by 1 (and logged): a clock must always be usable.
  explicit ModelClock(double time_scale = 1.0);

  double time_scale() const { return time_scale_; }

  // Wall time that `device_seconds` of modelled device time takes. Negative or NaN costs are 0;
  // costs are capped at kMaxWall so that deadlines computed from them cannot overflow.
  std::chrono::nanoseconds ToWall(double device_seconds) const;
  // Modelled device seconds that `wall` of wall time stands for (what applications measure).
  double ToDeviceSeconds(std::chrono::nanoseconds wall) const;
  // Sleeps for the scaled cost: fixed costs such as context creation and module loading.
  void Pay(double device_seconds) const;

  // One day: far beyond any modelled operation, far below the range of a nanosecond count.
  static constexpr std::chrono::nanoseconds kMaxWall = std::chrono::hours(24);

 private:
  double time_scale_;
};

}  // namespace phos::sim
