// The exported table of a simgpu module. Included exactly once per module, by the source file that
// phos_add_kernel_module() generates, after the module's kernel headers.
#pragma once

#if defined(__CUDACC__)
#error "phos/kernel/sim_module_main.h is for g++ builds of simgpu modules"
#endif

#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "phos/kernel.h"
#include "phos/kernel/sim_module_abi.h"

namespace phos::kernel {
namespace PHOS_KERNEL_PRIVATE sim {

class ModuleTable {
 public:
  ModuleTable() {
    kernels_.reserve(Registration::count());
    // The lists run from the last registered back: the table is in registration order.
    for (const Registration* r = Registration::last(); r != nullptr; r = r->previous()) {
      PhosSimKernelInfo kernel{};
      kernel.name = ExportedName(r->address());
      kernel.entry = r->entry();
      kernel.param_count = r->param_count();
      kernel.param_offsets = r->param_offsets();
      kernel.param_sizes = r->param_sizes();
      kernels_.push_back(kernel);
    }
    std::reverse(kernels_.begin(), kernels_.end());
    variables_.reserve(VariableRegistration::count());
    for (const VariableRegistration* r = VariableRegistration::last(); r != nullptr; r = r->previous()) {
      PhosSimVariableInfo variable{};
      variable.name = ExportedName(r->object());
      variable.size = r->size();
      variable.alignment = r->alignment();
      variable.constant = r->constant() ? 1 : 0;
      variable.address = r->address();
      variables_.push_back(variable);
    }
    std::reverse(variables_.begin(), variables_.end());
    info_.abi_version = PHOS_SIM_MODULE_ABI_VERSION;
    info_.kernel_count = static_cast<uint32_t>(kernels_.size());
    info_.kernels = kernels_.data();
    info_.variable_count = static_cast<uint32_t>(variables_.size());
    info_.variables = variables_.data();
  }
  const PhosSimModuleInfo* info() const { return &info_; }

 private:
  // The exported symbol at exactly `address`: its name is the mangling nvcc gives the kernel (or
  // variable) too. Null when it has no exported symbol (internal linkage); the loader rejects
  // that module.
  static const char* ExportedName(const void* address) {
    Dl_info info{};
    if (dladdr(address, &info) == 0 || info.dli_saddr != address) return nullptr;
    return info.dli_sname;
  }

  std::vector<PhosSimKernelInfo> kernels_;
  std::vector<PhosSimVariableInfo> variables_;
  PhosSimModuleInfo info_{};
};

}  // namespace sim
}  // namespace phos::kernel

// Built at the first call, after the module's static initialisers have registered every kernel
// and variable.
extern "C" __attribute__((visibility("default"))) const PhosSimModuleInfo* phos_sim_module_info(void) {
  static const phos::kernel::sim::ModuleTable table;
  return table.info();
}
