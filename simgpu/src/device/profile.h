// Device profiles: the numbers simgpu models a GPU with. Data, not code: each number in
// profile.cc carries its source.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace phos::sim {

struct DeviceProfile {
  std::string_view name;         // profile name used in configuration, e.g. "a100-pcie4"
  std::string_view device_name;  // what cuDeviceGetName reports
  int cc_major = 0;              // compute capability
  int cc_minor = 0;
  int sm_count = 0;
  uint64_t memory_bytes = 0;

  // Link and memory bandwidths, bytes per device second.
  double h2d_pinned_bps = 0;
  double d2h_pinned_bps = 0;
  double h2d_pageable_bps = 0;
  double d2h_pageable_bps = 0;
  double d2d_bps = 0;

  // Fixed costs, device seconds.
  double context_create_s = 0;
  double module_load_s = 0;
  double kernel_launch_s = 0;
  // cublasCreate: the first handle of a context loads the library's state into it; later ones
  // are cheap.
  double blas_handle_create_first_s = 0;
  double blas_handle_create_s = 0;
  // ncclCommInitRank / ncclCommInitAll / ncclCommSplit: creating one communicator (its ranks
  // initialise in parallel).
  double nccl_comm_init_s = 0;

  // Attributes reported by cuDeviceGetAttribute.
  int async_engine_count = 2;
  int memory_clock_khz = 0;
  int memory_bus_width_bits = 0;
  int l2_cache_bytes = 0;
  int clock_rate_khz = 0;
};

// The profile named `name`, or nullptr.
const DeviceProfile* FindProfile(std::string_view name);
// Every profile, in a fixed order (for listings and error messages).
const std::vector<const DeviceProfile*>& AllProfiles();

}  // namespace phos::sim
