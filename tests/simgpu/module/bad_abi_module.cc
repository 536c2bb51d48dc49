// A shared object that looks like a simgpu module but speaks a newer module ABI: the loader must
// refuse it rather than read a table whose layout it does not know.
#include "phos/kernel/sim_module_abi.h"

extern "C" __attribute__((visibility("default"))) const PhosSimModuleInfo* phos_sim_module_info(void) {
  static const PhosSimModuleInfo info = {PHOS_SIM_MODULE_ABI_VERSION + 1, 0, nullptr};
  return &info;
}
