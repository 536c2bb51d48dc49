// The phosSim* extensions (phos/simgpu/simgpu.h).
#include "phos/simgpu/simgpu.h"

#include "api/copy.h"
#include "api/driver.h"
#include "exec/access_guard.h"
#include "memory/guard_table.h"

using namespace phos::sim;

namespace {

// The driver and its device `device`: CUDA_ERROR_NOT_INITIALIZED before cuInit,
// CUDA_ERROR_INVALID_DEVICE for no such device.
CUresult RequireDevice(CUdevice device, Driver** d, Device** dev) {
  if (CUresult r = RequireDriver(d); r != CUDA_SUCCESS) return r;
  *dev = (*d)->device(device);
  return *dev == nullptr ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

// A device's counters now and as phosSimResetStats last left them.
struct StatsSince {
  ExecutorStats now, base;
  uint64_t released_unzeroed = 0, released_unzeroed_base = 0;
};

CUresult ReadStatsSince(CUdevice device, StatsSince* out) {
  Driver* d = nullptr;
  Device* dev = nullptr;
  if (CUresult r = RequireDevice(device, &d, &dev); r != CUDA_SUCCESS) return r;
  // Read under the lock phosSimResetStats takes: a reset between reading the counters and their
  // baselines would make the differences wrap.
  std::lock_guard lock(dev->stats_mu);
  out->now = dev->executor->stats();
  out->released_unzeroed = d->memory().ReleasedUnzeroedBytes(device);
  out->base = dev->stats_base;
  out->released_unzeroed_base = dev->released_unzeroed_base;
  return CUDA_SUCCESS;
}

PhosSimProfileInfo InfoOf(const DeviceProfile& p) {
  return PhosSimProfileInfo{p.h2d_pinned_bps,   p.d2h_pinned_bps,   p.h2d_pageable_bps,
                            p.d2h_pageable_bps, p.d2d_bps,          p.context_create_s,
                            p.module_load_s,    p.kernel_launch_s};
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult phosSimConfigure(const PhosSimConfig* config) {
  if (config == nullptr || config->profile == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SimConfig c;
  c.profile = FindProfile(config->profile);
  c.time_scale = config->time_scale;
  c.device_count = config->device_count;
  c.memory_bytes = config->memory_bytes;
  if (c.profile == nullptr || !(c.time_scale > 0) || c.device_count < 1 || c.device_count > SimConfig::kMaxDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Driver::Configure(c);
}

PHOS_SIM_API CUresult phosSimGetConfig(PhosSimConfig* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  const SimConfig& c = d->config();
  // Profile names are string literals: they live as long as the process.
  config->profile = c.profile->name.data();
  config->time_scale = c.time_scale;
  config->device_count = c.device_count;
  config->memory_bytes = c.device_memory();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimGetProfile(CUdevice device, PhosSimProfileInfo* info) {
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  Device* dev = nullptr;
  if (CUresult r = RequireDevice(device, &d, &dev); r != CUDA_SUCCESS) return r;
  *info = InfoOf(*dev->profile);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimGetNamedProfile(const char* name, PhosSimProfileInfo* info) {
  if (name == nullptr || info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceProfile* p = FindProfile(name);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *info = InfoOf(*p);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimGetStats(CUdevice device, PhosSimStats* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StatsSince since;
  if (CUresult r = ReadStatsSince(device, &since); r != CUDA_SUCCESS) return r;
  const ExecutorStats& now = since.now;
  const ExecutorStats& base = since.base;
  PhosSimStats s{};
  for (int e = 0; e < kEngineCount; ++e) {
    const EngineStats& n = now.engines[e];
    const EngineStats& b = base.engines[e];
    s.ops += n.ops - b.ops;
    s.host_bound_ops += n.host_bound_ops - b.host_bound_ops;
  }
  // Every op is paced except host functions and stream memory operations, which have no modelled
  // cost.
  s.paced_ops = s.ops - (now.engine(Engine::kHost).ops - base.engine(Engine::kHost).ops) -
                (now.engine(Engine::kMemOp).ops - base.engine(Engine::kMemOp).ops);
  s.h2d_bytes = now.engine(Engine::kCopyH2D).bytes - base.engine(Engine::kCopyH2D).bytes;
  s.d2h_bytes = now.engine(Engine::kCopyD2H).bytes - base.engine(Engine::kCopyD2H).bytes;
  s.d2d_bytes = now.engine(Engine::kCompute).bytes - base.engine(Engine::kCompute).bytes;
  s.kernels = now.kernels_run - base.kernels_run;
  s.guard_faults = now.guard_faults - base.guard_faults;
  s.released_unzeroed_bytes = since.released_unzeroed - since.released_unzeroed_base;
  *out = s;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimGetEngineStats(CUdevice device, PhosSimEngineStats* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StatsSince since;
  if (CUresult r = ReadStatsSince(device, &since); r != CUDA_SUCCESS) return r;
  auto ops = [&](Engine e) { return since.now.engine(e).ops - since.base.engine(e).ops; };
  auto host_bound = [&](Engine e) {
    return since.now.engine(e).host_bound_ops - since.base.engine(e).host_bound_ops;
  };
  *out = PhosSimEngineStats{.h2d_ops = ops(Engine::kCopyH2D),
                            .h2d_host_bound_ops = host_bound(Engine::kCopyH2D),
                            .d2h_ops = ops(Engine::kCopyD2H),
                            .d2h_host_bound_ops = host_bound(Engine::kCopyD2H),
                            .compute_ops = ops(Engine::kCompute),
                            .compute_host_bound_ops = host_bound(Engine::kCompute)};
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimResetStats(CUdevice device) {
  Driver* d = nullptr;
  Device* dev = nullptr;
  if (CUresult r = RequireDevice(device, &d, &dev); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(dev->stats_mu);
  dev->stats_base = dev->executor->stats();
  dev->released_unzeroed_base = d->memory().ReleasedUnzeroedBytes(device);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimGuardRange(CUdeviceptr ptr, size_t bytes) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  const uint64_t page = GuardTable::PageSize();
  if (bytes == 0 || ptr % page != 0) return CUDA_ERROR_INVALID_VALUE;
  // The page rounding stays inside the allocation: linear allocations reserve whole pages and
  // VMM mappings are whole granules.
  if (!d->memory().CheckRange(ptr, bytes, Access::kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
  return GuardTable::Global().Guard(ptr, (bytes + page - 1) / page * page);
}

PHOS_SIM_API CUresult phosSimGuardRangeWrites(CUdeviceptr ptr, size_t bytes) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  const uint64_t page = GuardTable::PageSize();
  if (bytes == 0 || ptr % page != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!d->memory().CheckRange(ptr, bytes, Access::kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
  return GuardTable::Global().Guard(ptr, (bytes + page - 1) / page * page, PROT_READ);
}

PHOS_SIM_API CUresult phosSimUnguardRange(CUdeviceptr ptr, size_t bytes) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  const uint64_t page = GuardTable::PageSize();
  if (bytes == 0 || bytes > UINT64_MAX - page) return CUDA_ERROR_INVALID_VALUE;
  return GuardTable::Global().Unguard(ptr, (bytes + page - 1) / page * page);
}

PHOS_SIM_API CUresult phosSimSetGuardHandler(PhosSimGuardHandler fn, void* user) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  if (fn == nullptr) {
    AccessGuard::SetHandler(nullptr);
    return CUDA_SUCCESS;
  }
  AccessGuard::SetHandler([fn, user](uintptr_t address, const char* what) {
    return fn(user, address, what) == PHOS_SIM_GUARD_RETRY ? GuardDecision::kRetry : GuardDecision::kFail;
  });
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult phosSimWriteGuarded(CUdeviceptr dst, const void* src, size_t bytes) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  return d->memory().WriteGuarded(dst, src, bytes);
}

PHOS_SIM_API CUresult phosSimMemcpyHtoDAsyncGuarded(CUdeviceptr dst, const void* src, size_t bytes,
                                                    CUstream stream) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> s;
  if (CUresult r = RequireStream(stream, &d, &ctx, &s); r != CUDA_SUCCESS) return r;
  return EnqueueGuardedCopy(*d, *s, dst, src, bytes);
}

}  // extern "C"
