// Physical device memory as phos maps it with the VMM calls (cuMemCreate, cuMemMap): the access a
// mapping grants, and how a physical allocation nobody may read any more is zeroed and released.
// Below the context pool and the runtime, which both end such memory.
#pragma once

#include <cstdint>

#include "phos/base/status.h"
#include "phos/driver/driver_table.h"

namespace phos::driver {

// cuMemSetAccess of [address, + bytes) for `device` with `flags` (CU_MEM_ACCESS_FLAGS_PROT_*).
CUresult SetDeviceAccess(DriverTable& driver, CUdeviceptr address, uint64_t bytes, int device, CUmemAccess_flags flags);

// Zeroes `bytes` of `handle` (physical memory of `device`, mapped at no address anyone uses any
// more) through a staging mapping of its own, waits for the device, then releases it. A context
// of `device` must be current. Released even when it cannot be zeroed: kept, it would be lost to
// the device for good; the error says so.
Status ZeroAndRelease(DriverTable& driver, CUmemGenericAllocationHandle handle, uint64_t bytes, int device);

}  // namespace phos::driver
