// The g++ side of PHOS_DEVICE_VARIABLE / PHOS_CONSTANT_VARIABLE: a module variable whose bytes
// live in device memory the simgpu loader allocates when the module loads, as a CUDA module's
// __device__ and __constant__ variables do (so cuModuleGetGlobal, cudaMemcpyToSymbol and
// snapshots reach them). Include phos/kernel.h, not this.
//
// In a kernel, the variable reads as the variable nvcc would give: a scalar converts to its value
// and is assigned, updated in place (+=, ++, ...) and has its address taken (&name, a device
// pointer for atomics); an array indexes and decays to a pointer to its first element. A struct
// is read whole (`Params p = name;`): member access on the variable itself is not available.
#pragma once

#if defined(__CUDACC__)
#error "phos/kernel/sim_variable.h is for g++ builds of simgpu modules"
#endif

#include <stdint.h>

#include <type_traits>

// Hidden, as the rest of the module's machinery (sim_registry.h, PHOS_KERNEL_PRIVATE): declared
// here first, so the namespace's visibility is given here too.
namespace phos::kernel {
namespace __attribute__((visibility("hidden"))) sim {
class VariableRegistration;
}  // namespace sim
}  // namespace phos::kernel

namespace phos::kernel {

// Default visibility, unlike the module's other machinery (sim_registry.h): a variable takes the
// visibility of its type, and the variable must stay exported, since its exported symbol is its
// name (dladdr, as for kernels).
template <typename T>
class __attribute__((visibility("default"))) ModuleVariable {
  static_assert(std::is_trivially_copyable_v<T>,
                "a module variable is copied byte for byte (cudaMemcpyToSymbol, snapshots): its type must be "
                "trivially copyable");

 public:
  using Element = std::remove_extent_t<T>;

  constexpr ModuleVariable() = default;
  ModuleVariable(const ModuleVariable&) = delete;
  ModuleVariable& operator=(const ModuleVariable&) = delete;

  // The variable's bytes in device memory.
  T& value() const { return *static_cast<T*>(address_); }
  T* operator&() const { return static_cast<T*>(address_); }

  // Arrays: what `name[i]` and `name + i` use.
  operator Element*() const
    requires std::is_array_v<T>
  {
    return value();
  }

  // Scalars.
  operator T&() const
    requires(!std::is_array_v<T>)
  {
    return value();
  }
  template <typename V>
  const ModuleVariable& operator=(V&& v) const
    requires(!std::is_array_v<T>)
  {
    value() = static_cast<V&&>(v);
    return *this;
  }
#define PHOS_MODULE_VARIABLE_UPDATE(op)              \
  template <typename V>                              \
  const ModuleVariable& operator op(V&& v) const     \
    requires(!std::is_array_v<T>)                    \
  {                                                  \
    value() op static_cast<V&&>(v);                  \
    return *this;                                    \
  }
  PHOS_MODULE_VARIABLE_UPDATE(+=)
  PHOS_MODULE_VARIABLE_UPDATE(-=)
  PHOS_MODULE_VARIABLE_UPDATE(*=)
  PHOS_MODULE_VARIABLE_UPDATE(/=)
  PHOS_MODULE_VARIABLE_UPDATE(%=)
  PHOS_MODULE_VARIABLE_UPDATE(&=)
  PHOS_MODULE_VARIABLE_UPDATE(|=)
  PHOS_MODULE_VARIABLE_UPDATE(^=)
  PHOS_MODULE_VARIABLE_UPDATE(<<=)
  PHOS_MODULE_VARIABLE_UPDATE(>>=)
#undef PHOS_MODULE_VARIABLE_UPDATE
  // Templates, so that a return type naming T is formed only for scalars (a function cannot
  // return an array, even one a constraint rules out).
  template <typename U = T>
  U& operator++() const
    requires(!std::is_array_v<U>)
  {
    return ++value();
  }
  template <typename U = T>
  U operator++(int) const
    requires(!std::is_array_v<U>)
  {
    return value()++;
  }
  template <typename U = T>
  U& operator--() const
    requires(!std::is_array_v<U>)
  {
    return --value();
  }
  template <typename U = T>
  U operator--(int) const
    requires(!std::is_array_v<U>)
  {
    return value()--;
  }

 private:
  friend class sim::VariableRegistration;
  // Set by the loader through the module table before any kernel of the module runs; null in a
  // host program that compiles the kernels only to name them.
  void* address_ = nullptr;
};

}  // namespace phos::kernel
