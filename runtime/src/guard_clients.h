// simgpu has one guard handler per process (phosSimSetGuardHandler), and several parts of phosd
// guard device ranges of their own: each restore's loader (buffers not loaded yet, D8) and each
// soft copy-on-write checkpoint (buffers not copied yet, D10). Each registers as a GuardClient;
// a fault goes to the client whose ranges hold the address.
#pragma once

#include <cuda.h>

#include "phos/base/status.h"
#include "phos/driver/driver_table.h"  // and simgpu.h, its guard types

namespace phos::runtime {

class GuardClient {
 public:
  // Whether the faulting address lies in one of this client's guarded ranges.
  virtual bool Owns(CUdeviceptr address) const = 0;
  // Serves a fault in one of its ranges (on simgpu's guard thread; see PhosSimGuardHandler).
  virtual PhosSimGuardDecision OnFault(CUdeviceptr address, const char* what) = 0;

 protected:
  ~GuardClient() = default;
};

// Installs the process's handler (again: something may have replaced it) and adds `client`. A
// handler never runs while a client is added or removed, so a client removed is never called.
Status RegisterGuardClient(driver::DriverTable& driver, GuardClient* client);
void UnregisterGuardClient(GuardClient* client);

}  // namespace phos::runtime
