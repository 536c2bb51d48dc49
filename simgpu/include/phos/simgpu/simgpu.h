/* simgpu extensions: what libphos-simgpu.so offers beyond the CUDA driver API it implements.
 *
 * The runtime resolves these by name from the driver table like any other entry point
 * (docs/design.md D2); NVIDIA's libcuda has none of them, so code must treat them as optional. */
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

/* The same figures of the profile named `name` ("a100-pcie4", ...), before cuInit as after: what a
 * caller needs to choose the time scale it configures. CUDA_ERROR_INVALID_VALUE for an unknown
 * name. */
CUresult phosSimGetNamedProfile(const char* name, PhosSimProfileInfo* info);

/* What a device's engines did since the process started or since phosSimResetStats. */
typedef struct PhosSimStats {
  unsigned long long ops;            /* operations executed (copies, memsets, kernels, host functions,
                                      * stream memory operations) */
  unsigned long long paced_ops;      /* operations with a modelled cost */
  unsigned long long host_bound_ops; /* paced operations whose real duration exceeded the modelled one */
  unsigned long long h2d_bytes;
  unsigned long long d2h_bytes;
  unsigned long long d2d_bytes;      /* device-to-device copies and memsets */
  unsigned long long kernels;
  unsigned long long guard_faults;   /* touches of guarded ranges served by the guard handler */
  /* Physical allocations (cuMemCreate) released that may hold bytes written since they were last
   * zeroed in whole: on a GPU, memory the driver may hand to the process's next allocation as it
   * is (simgpu hands it back zeroed). */
  unsigned long long released_unzeroed_bytes;
} PhosSimStats;

CUresult phosSimGetStats(CUdevice device, PhosSimStats* stats);

/* phosSimGetStats's paced and host-bound operations by engine, since the same point: which of the
 * device's engines the host could not keep at their modelled pace. */
typedef struct PhosSimEngineStats {
  unsigned long long h2d_ops;      /* host-to-device copies */
  unsigned long long h2d_host_bound_ops;
  unsigned long long d2h_ops;      /* device-to-host copies */
  unsigned long long d2h_host_bound_ops;
  unsigned long long compute_ops;  /* kernels, memsets, device-to-device copies */
  unsigned long long compute_host_bound_ops;
} PhosSimEngineStats;

CUresult phosSimGetEngineStats(CUdevice device, PhosSimEngineStats* stats);
CUresult phosSimResetStats(CUdevice device);

/* Guarded ranges: device memory that kernels and copy engines cannot touch, for validating which
 * buffers work really touches (phos guards buffers that are not restored yet). A guarded range
 * keeps its contents; device work that touches it faults. With no guard handler, that fault is
 * an ordinary one: the op fails with a sticky CUDA_ERROR_ILLEGAL_ADDRESS. With a handler, the
 * faulting op is held at the access, the handler runs on simgpu's guard thread, and on RETRY
 * simgpu unguards the range (if the handler did not) and the access runs again; FAIL fails the
 * op as without a handler. Host code touching a guarded range crashes, as it would touching
 * device memory on a GPU. See simgpu/README.md. */

/* Makes [ptr, ptr + bytes) inaccessible to device work. ptr must be page-aligned (4 KiB) and
 * bytes > 0; bytes is rounded up to whole pages, which stay inside the allocation (linear
 * allocations and VMM mappings occupy whole pages), so neighbours sharing a page are guarded too.
 * The range must be read-write device memory of one linear allocation or adjacent read-write
 * VMM mappings, and overlap no guarded range: CUDA_ERROR_INVALID_VALUE otherwise.
 * CUDA_ERROR_OUT_OF_MEMORY when 8192 ranges are guarded already or the host cannot split its
 * mappings further. Freeing, unmapping or cuMemSetAccess of guarded memory ends its guard. */
CUresult phosSimGuardRange(CUdeviceptr ptr, size_t bytes);

/* The same, for writes only: device work that writes [ptr, ptr + bytes) faults, work that reads it
 * runs on (phos guards the buffers a checkpoint has not copied yet, so that a write it did not
 * expect is caught before it lands). Host code writing it crashes. */
CUresult phosSimGuardRangeWrites(CUdeviceptr ptr, size_t bytes);

/* Makes a guarded range accessible again; ptr and bytes as given to phosSimGuardRange or
 * phosSimGuardRangeWrites. CUDA_ERROR_INVALID_VALUE when that is not a guarded range. */
CUresult phosSimUnguardRange(CUdeviceptr ptr, size_t bytes);

typedef enum PhosSimGuardDecision {
  PHOS_SIM_GUARD_RETRY = 0, /* the data is resident: run the access again */
  PHOS_SIM_GUARD_FAIL = 1   /* fail the op with CUDA_ERROR_ILLEGAL_ADDRESS */
} PhosSimGuardDecision;

/* Called on simgpu's guard thread (ordinary thread context: locks, allocation and simgpu calls
 * are allowed) with the faulting address and what touched it: a kernel's mangled name,
 * "memcpy", "memset", or an engine name. Faults are served one at a time; the faulting engine
 * thread waits meanwhile, so the handler must not wait for device work that needs that engine
 * (a cuStreamSynchronize of the faulting stream deadlocks). It fills the range with
 * phosSimWriteGuarded, or unguards it first and writes it directly. */
typedef PhosSimGuardDecision (*PhosSimGuardHandler)(void* user, CUdeviceptr address, const char* what);

/* Sets the process's guard handler; fn == NULL removes it (guard faults are illegal addresses
 * again). Requires cuInit. */
CUresult phosSimSetGuardHandler(PhosSimGuardHandler fn, void* user);

/* Copies bytes from host memory into device memory, guarded or not, without unguarding it (so no
 * kernel sees a half-written range). The range must lie in one linear allocation or one
 * read-write VMM mapping: CUDA_ERROR_INVALID_VALUE otherwise. Synchronous, on the calling
 * thread, unpaced and unordered with respect to streams. */
CUresult phosSimWriteGuarded(CUdeviceptr dst, const void* src, size_t bytes);

/* cuMemcpyHtoDAsync into device memory, guarded or not, without unguarding it: the same copy
 * engine, pinned or pageable rate, stream order, events and errors, but the device-side write
 * goes through the backing's second mapping (as phosSimWriteGuarded's does), so it neither
 * faults nor ends a guard. A restore loads a guarded buffer with it, so that a kernel touching the
 * buffer before it is ready is still caught. dst must lie in one linear allocation or one
 * read-write VMM mapping, and src must be host memory: CUDA_ERROR_INVALID_VALUE otherwise. Memory
 * freed or unmapped before the copy runs fails it with a sticky CUDA_ERROR_ILLEGAL_ADDRESS. */
CUresult phosSimMemcpyHtoDAsyncGuarded(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);

/* cuModuleLoadData for an image of `bytes` bytes: the loader reads nothing past them (an image
 * whose ELF headers name anything beyond is CUDA_ERROR_INVALID_IMAGE). What a server loading
 * images it received should call: cuModuleLoadData, given no size, measures the image from its
 * own headers. */
CUresult phosSimModuleLoadDataSized(CUmodule* module, const void* image, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_SIMGPU_SIMGPU_H_ */
