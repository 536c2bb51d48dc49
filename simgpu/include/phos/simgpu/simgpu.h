/* simgpu extensions: what libphos-simgpu.so offers beyond the CUDA driver API it implements.
 *
 * The runtime resolves these by name from the driver table like any other entry point
 * (BRIEF D2); NVIDIA's libcuda has none of them, so code must treat them as optional. */
#ifndef PHOS_SIMGPU_SIMGPU_H_
#define PHOS_SIMGPU_SIMGPU_H_

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Process configuration, normally read from PHOS_SIMGPU_PROFILE, PHOS_SIMGPU_TIME_SCALE,
 * PHOS_SIMGPU_DEVICES and PHOS_SIMGPU_MEMORY at cuInit. */
typedef struct PhosSimConfig {
  const char* profile;             /* "a100-pcie4", "h100-pcie5", "ci" */
  double time_scale;               /* multiplies every modelled cost; > 0 */
  int device_count;                /* 1-8 */
  unsigned long long memory_bytes; /* per-device capacity; 0 = the profile's */
} PhosSimConfig;

/* Sets the configuration cuInit will use, instead of the environment. Must come before cuInit:
 * CUDA_ERROR_ILLEGAL_STATE afterwards; CUDA_ERROR_INVALID_VALUE for an unknown profile or a value
 * out of range. */
CUresult phosSimConfigure(const PhosSimConfig* config);

/* The configuration in effect (after cuInit). The profile string lives as long as the process. */
CUresult phosSimGetConfig(PhosSimConfig* config);

/* The modelled figures of a device's profile: device seconds and bytes per device second, before
 * the time scale. */
typedef struct PhosSimProfileInfo {
  double h2d_pinned_bps;
  double d2h_pinned_bps;
  double h2d_pageable_bps;
  double d2h_pageable_bps;
  double d2d_bps;
  double context_create_s;
  double module_load_s;
  double kernel_launch_s;
} PhosSimProfileInfo;

CUresult phosSimGetProfile(CUdevice device, PhosSimProfileInfo* info);

/* What a device's engines did since the process started or since phosSimResetStats. */
typedef struct PhosSimStats {
  unsigned long long ops;            /* operations executed (copies, memsets, kernels, host functions) */
  unsigned long long paced_ops;      /* operations with a modelled cost */
  unsigned long long host_bound_ops; /* paced operations whose real duration exceeded the modelled one */
  unsigned long long h2d_bytes;
  unsigned long long d2h_bytes;
  unsigned long long d2d_bytes;      /* device-to-device copies and memsets */
  unsigned long long kernels;
} PhosSimStats;

CUresult phosSimGetStats(CUdevice device, PhosSimStats* stats);
CUresult phosSimResetStats(CUdevice device);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_SIMGPU_SIMGPU_H_ */
