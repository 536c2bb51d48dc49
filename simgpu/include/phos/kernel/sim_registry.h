// The g++ side of PHOS_EXPORT_KERNEL: each exported kernel registers, at module load, an entry that
// runs a range of its blocks and the layout CUDA gives its parameter buffer. The registrations
// become the module's PhosSimModuleInfo table (sim_module_main.h). Include phos/kernel.h, not this.
#pragma once

#if defined(__CUDACC__)
#error "phos/kernel/sim_registry.h is for g++ builds of simgpu modules"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "phos/kernel/sim_device.h"
#include "phos/kernel/sim_module_abi.h"
#include "phos/kernel/sim_variable.h"

// Hidden as a whole: each loaded module keeps its own registry and its own template instances.
namespace phos::kernel {
namespace PHOS_KERNEL_PRIVATE sim {

// Where CUDA puts each parameter in a kernel's parameter buffer: in declaration order, each at the
// next offset aligned to its alignment, taking sizeof bytes (checked against nvcc's
// EIATTR_KPARAM_INFO for sm_80). One extra element keeps the arrays non-empty.
template <typename... Params>
struct ParamLayout {
  static constexpr uint32_t kCount = sizeof...(Params);
  static constexpr uint64_t kSizes[kCount + 1] = {sizeof(Params)..., 0};
  static constexpr uint64_t kAligns[kCount + 1] = {alignof(Params)..., 1};
  static constexpr auto Offsets() {
    struct Table {
      uint64_t at[kCount + 1];
    } table{};
    uint64_t next = 0;
    for (uint32_t i = 0; i < kCount; ++i) {
      next = (next + kAligns[i] - 1) / kAligns[i] * kAligns[i];
      table.at[i] = next;
      next += kSizes[i];
    }
    table.at[kCount] = next;
    return table;
  }
  static constexpr auto kOffsets = Offsets();
};

template <typename Fn>
struct KernelSignature {
  static_assert(kNotAvailable<Fn>, "PHOS_EXPORT_KERNEL names a PHOS_GLOBAL function returning void");
};
template <typename... Params>
struct KernelSignature<void (*)(Params...)> {
  static_assert((std::is_trivially_copyable_v<Params> && ...),
                "kernel parameters are copied byte for byte into the parameter buffer, as CUDA does: "
                "each must be trivially copyable");
  using Layout = ParamLayout<Params...>;
};
template <typename... Params>
struct KernelSignature<void (*)(Params...) noexcept> : KernelSignature<void (*)(Params...)> {};

// One kernel parameter copied out of kernelParams[i], which CUDA does not require to be aligned.
template <typename T>
class ParamValue {
 public:
  explicit ParamValue(const void* source) { memcpy(storage_, source, sizeof(T)); }
  // Trivially copyable types are implicit-lifetime: the memcpy above created the object.
  T& value() { return *std::launder(reinterpret_cast<T*>(storage_)); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

template <auto Kernel, typename... Params, size_t... I>
void RunBlockRange(const PhosSimLaunchGeometry& geometry, void* const* args, uint64_t first_block,
                   uint64_t end_block, void (*)(Params...), std::index_sequence<I...>) {
  std::tuple<ParamValue<Params>...> values{ParamValue<Params>(args[I])...};
  const uint32_t bx = geometry.block[0], by = geometry.block[1], bz = geometry.block[2];
  const uint64_t gx = geometry.grid[0], gy = geometry.grid[1];
  ::gridDim = dim3(geometry.grid[0], geometry.grid[1], geometry.grid[2]);
  ::blockDim = dim3(bx, by, bz);
  for (uint64_t block = first_block; block < end_block; ++block) {
    ::blockIdx = uint3{static_cast<unsigned int>(block % gx), static_cast<unsigned int>(block / gx % gy),
                       static_cast<unsigned int>(block / (gx * gy))};
    for (uint32_t z = 0; z < bz; ++z) {
      for (uint32_t y = 0; y < by; ++y) {
        for (uint32_t x = 0; x < bx; ++x) {
          ::threadIdx = uint3{x, y, z};
          // Each simulated thread gets its own copy of the parameters, as on a GPU.
          Kernel(std::get<I>(values).value()...);
        }
      }
    }
  }
}

template <auto Kernel>
void RunBlocks(const PhosSimLaunchGeometry* geometry, void* const* args, uint64_t first_block,
               uint64_t end_block) {
  using Layout = typename KernelSignature<decltype(Kernel)>::Layout;
  RunBlockRange<Kernel>(*geometry, args, first_block, end_block, Kernel,
                        std::make_index_sequence<Layout::kCount>{});
}

template <auto Kernel>
struct KernelTag {};

// The registrations of one kind in a module (kernels, variables), linked by their constructors
// during static initialisation. Each new one goes at the head and writes only itself and the list,
// never another registration: one in another source file is a global with a dynamic initialiser,
// which a constructor must not touch (AddressSanitizer's init-order check reports it). So the list
// runs from the last registered back to the first; ModuleTable restores registration order, which
// within one source file is source order.
template <typename T>
class RegistrationList {
 public:
  constexpr RegistrationList() = default;
  void Push(T* registration) {
    registration->previous_ = last_;
    last_ = registration;
    ++count_;
  }
  const T* last() const { return last_; }
  uint32_t count() const { return count_; }

 private:
  T* last_ = nullptr;
  uint32_t count_ = 0;
};

// One PHOS_EXPORT_KERNEL.
class Registration {
 public:
  template <auto Kernel>
  explicit Registration(KernelTag<Kernel>)
      : address_(reinterpret_cast<const void*>(Kernel)),
        entry_(&RunBlocks<Kernel>),
        param_count_(KernelSignature<decltype(Kernel)>::Layout::kCount),
        param_offsets_(KernelSignature<decltype(Kernel)>::Layout::kOffsets.at),
        param_sizes_(KernelSignature<decltype(Kernel)>::Layout::kSizes) {
    list_.Push(this);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  // The kernel's code, which dladdr names when the module table is built.
  const void* address() const { return address_; }
  PhosSimKernelEntry entry() const { return entry_; }
  uint32_t param_count() const { return param_count_; }
  const uint64_t* param_offsets() const { return param_offsets_; }
  const uint64_t* param_sizes() const { return param_sizes_; }
  // The one registered before this, or null.
  const Registration* previous() const { return previous_; }

  static const Registration* last() { return list_.last(); }
  static uint32_t count() { return list_.count(); }

 private:
  friend class RegistrationList<Registration>;
  // Constant-initialised, so it is ready before any registration's constructor runs.
  static constinit inline RegistrationList<Registration> list_{};

  const void* address_;
  PhosSimKernelEntry entry_;
  uint32_t param_count_;
  const uint64_t* param_offsets_;
  const uint64_t* param_sizes_;
  Registration* previous_ = nullptr;
};

// One PHOS_DEVICE_VARIABLE / PHOS_CONSTANT_VARIABLE, listed like the kernels.
class VariableRegistration {
 public:
  template <typename T>
  VariableRegistration(ModuleVariable<T>* variable, bool constant)
      : object_(variable), address_(&variable->address_), size_(sizeof(T)), alignment_(alignof(T)), constant_(constant) {
    list_.Push(this);
  }
  VariableRegistration(const VariableRegistration&) = delete;
  VariableRegistration& operator=(const VariableRegistration&) = delete;

  // The variable object, whose exported symbol dladdr names when the module table is built.
  const void* object() const { return object_; }
  void** address() const { return address_; }
  uint64_t size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  bool constant() const { return constant_; }
  const VariableRegistration* previous() const { return previous_; }

  static const VariableRegistration* last() { return list_.last(); }
  static uint32_t count() { return list_.count(); }

 private:
  friend class RegistrationList<VariableRegistration>;
  static constinit inline RegistrationList<VariableRegistration> list_{};

  const void* object_;
  void** address_;
  uint64_t size_;
  uint64_t alignment_;
  bool constant_;
  VariableRegistration* previous_ = nullptr;
};

}  // namespace sim
}  // namespace phos::kernel
