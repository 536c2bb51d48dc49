// A shared object whose module table lists a variable the loader cannot bind (no address slot):
// the loader must refuse the module rather than write through a null pointer.
#include "phos/kernel/sim_module_abi.h"

extern "C" __attribute__((visibility("default"))) const PhosSimModuleInfo* phos_sim_module_info(void) {
  static const PhosSimVariableInfo variable = {"orphan", 4, 4, 0, 0, nullptr};
  static const PhosSimModuleInfo info = {PHOS_SIM_MODULE_ABI_VERSION, 0, nullptr, 1, 0, &variable};
  return &info;
}
