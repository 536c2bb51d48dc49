// A kernel without external linkage: it has no exported symbol to name it by, so simgpu rejects
// the module (nvcc would compile it; cuModuleGetFunction could not find it by a stable name).
#pragma once

#include "phos/kernel.h"

namespace {
PHOS_GLOBAL void unnamed(int* p) {
  *p = 1;
}
PHOS_EXPORT_KERNEL(unnamed);
}  // namespace
