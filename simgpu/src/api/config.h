// How a simgpu process is configured: which device profile, how many devices, the time scale.
// Read from the environment at cuInit unless phosSimConfigure() set it first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "device/profile.h"

namespace phos::sim {

struct SimConfig {
  // PHOS_SIMGPU_PROFILE. Default: a100-pcie4.
  const DeviceProfile* profile = nullptr;
  // PHOS_SIMGPU_TIME_SCALE: multiplies every modelled cost. At 10, a100-pcie4's 25 GB/s link
  // moves 2.5 GB/s of wall-clock bytes, which this class of 2-core host sustains with memcpy, so
  // copies are bound by the modelled link and not by the host. Default: 10.
  double time_scale = kDefaultTimeScale;
  // PHOS_SIMGPU_DEVICES: number of simulated devices, 1-8. Default: 1.
  int device_count = 1;
  // PHOS_SIMGPU_MEMORY: per-device capacity override in bytes (suffixes K, M, G, T, binary).
  // Default: 0, the profile's memory size.
  uint64_t memory_bytes = 0;
  // PHOS_SIMGPU_PREFAULT: bytes of device memory whose host pages are allocated at cuInit (in
  // the background) and kept for reuse (same suffixes). A GPU's memory is there before anything
  // is loaded into it; simgpu's is host memory, whose first touch costs the host time the
  // modelled device does not have. Default: 0 (pages allocated on first write).
  uint64_t prefault_bytes = 0;
  // PHOS_SIMGPU_KERNEL_TIMEOUT: seconds a kernel or library call may run before a watchdog stops
  // it, between two of its block ranges, with CUDA_ERROR_LAUNCH_TIMEOUT, sticky, as on a GPU driving a display (its device attribute
  // CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT then reads 1). simgpu runs a GPU's arithmetic on the
  // host's CPU, a thousand times slower: the watchdog bounds what one call can hold the compute
  // workers for. Default: 0, none, as on a data-center card.
  double kernel_timeout_seconds = 0;

  static constexpr double kDefaultTimeScale = 10.0;
  static constexpr int kMaxDevices = 8;

  uint64_t device_memory() const { return memory_bytes ? memory_bytes : profile->memory_bytes; }
  std::string ToString() const;
};

// Reads the PHOS_SIMGPU_* variables. On a bad value, returns false and says why in *error.
bool ConfigFromEnvironment(SimConfig* config, std::string* error);

// Parses "512M", "80G", "1048576". Returns false when malformed or zero.
bool ParseByteSize(std::string_view text, uint64_t* bytes);

}  // namespace phos::sim
