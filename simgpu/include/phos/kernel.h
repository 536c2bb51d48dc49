// Kernels written once (docs/design.md D4). A kernel header compiles under nvcc into ordinary __global__
// kernels, and under g++ into a simgpu module: a shared object that simgpu's cuModuleLoadData
// accepts, whose kernels carry the names nvcc gives them. PhosModules.cmake builds both from the
// same headers (phos_add_kernel_module).
//
//   #include "phos/kernel.h"
//   PHOS_GLOBAL void vec_add(const float* a, const float* b, float* c, int n) {
//     for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
//       c[i] = a[i] + b[i];
//   }
//   PHOS_EXPORT_KERNEL(vec_add);                          // "_Z7vec_addPKfS0_Pfi" on both sides
//   template <typename T> PHOS_GLOBAL void fill(T* p, T v, int n) { ... }
//   PHOS_EXPORT_KERNEL(fill<float>);                      // instantiates it for both sides
//
// Every kernel a module offers is named by PHOS_EXPORT_KERNEL, at namespace scope, after its
// definition. Kernels need external linkage (not `static`, not in an anonymous namespace): the
// module finds a kernel's name from its exported symbol. A module's headers are compiled together
// into one translation unit, each kernel defined once.
//
// What works in g++ mode (simgpu):
//   - threadIdx, blockIdx (uint3), blockDim, gridDim (dim3), warpSize; grid-stride loops;
//     any grid and block shape the device accepts.
//   - atomicAdd (int, unsigned, unsigned long long, float, double), atomicSub (int, unsigned),
//     atomicExch (int, unsigned, unsigned long long, float), atomicMax / atomicMin (int, unsigned,
//     unsigned long long), atomicCAS (int, unsigned, unsigned long long), __threadfence: blocks of
//     one launch run concurrently on several worker threads, and these are real atomics.
//   - PHOS_DEVICE helper functions and PHOS_DEVICE variables (one instance per loaded module, as
//     a __device__ variable has one per loaded CUDA module, but in the module's own host memory:
//     kernels only); __restrict__; min/max, rsqrtf, __expf, __logf, __powf, __fdividef,
//     __saturatef and the <math.h> functions.
//   - Module variables the host reaches (cudaMemcpyToSymbol, cudaGetSymbolAddress,
//     cuModuleGetGlobal), at namespace scope, zero-initialised, with no initialiser:
//       PHOS_CONSTANT_VARIABLE(float[16], coefficients);   // __constant__ float coefficients[16];
//       PHOS_DEVICE_VARIABLE(unsigned long long, hits);     // __device__ unsigned long long hits;
//     In g++ mode the loader allocates their bytes in device memory when the module loads;
//     kernels read and assign them as variables (phos/kernel/sim_variable.h says how far that
//     goes: a struct variable is read whole), and `&hits` is a device pointer, for atomics. A
//     host program that compiles the same header gets a host shadow of each, as under nvcc:
//     `cudaMemcpyToSymbol(coefficients, ...)` names the variable by it.
// What does NOT work in g++ mode, because the threads of a block run one after another on one CPU
// thread, so nothing can make a thread wait for its siblings:
//   - __syncthreads and its variants, __syncwarp, warp intrinsics (__shfl_*_sync, __ballot_sync,
//     __any_sync, __all_sync, __activemask, __match_any_sync): calling one fails to compile with
//     a static_assert naming it.
//   - __shared__ memory (static or `extern` dynamic): fails to compile.
//   - cooperative groups, textures and surfaces, __constant__ spelled directly: not defined, so
//     they fail to compile.
//   - __device__ / __global__ / __host__ spelled directly: use the PHOS_ macros.
// The g++ side assumes the kernel's behaviour does not depend on the order in which the threads
// of a block run, as a correct CUDA kernel without barriers does not. A plain load of a word that
// other blocks update with atomics (the usual first read of a CAS loop) is a data race in C++: on
// x86-64 it behaves as on a GPU (aligned loads do not tear), but ThreadSanitizer reports it.
#pragma once

#define PHOS_KERNEL_CONCAT_INNER(a, b) a##b
#define PHOS_KERNEL_CONCAT(a, b) PHOS_KERNEL_CONCAT_INNER(a, b)

namespace phos::kernel {
// The type a module variable macro names, so that an array type is one argument (`float[16]`).
template <typename T>
using VariableType = T;
}  // namespace phos::kernel

#if defined(__CUDACC__)

#define PHOS_GLOBAL __global__
#define PHOS_DEVICE __device__
#define PHOS_HOST_DEVICE __host__ __device__
#define PHOS_LAUNCH_BOUNDS(...) __launch_bounds__(__VA_ARGS__)
// Taking the kernel's address in host code makes nvcc instantiate a template kernel, so that the
// fatbin holds it.
#define PHOS_EXPORT_KERNEL(...)                                                                  \
  [[maybe_unused]] static void (*const PHOS_KERNEL_CONCAT(phos_kernel_export_, __COUNTER__))() = \
      reinterpret_cast<void (*)()>(&__VA_ARGS__)
#define PHOS_DEVICE_VARIABLE(type, name) __device__ ::phos::kernel::VariableType<type> name
#define PHOS_CONSTANT_VARIABLE(type, name) __constant__ ::phos::kernel::VariableType<type> name

#else  // g++: a simgpu module

#include "phos/kernel/sim_device.h"
#include "phos/kernel/sim_registry.h"

// Default visibility: the module names each kernel by its exported symbol (dladdr), which is the
// compiler's Itanium mangling, the same nvcc uses.
#define PHOS_GLOBAL __attribute__((visibility("default")))
#define PHOS_DEVICE
#define PHOS_HOST_DEVICE
#define PHOS_LAUNCH_BOUNDS(...)
#define PHOS_EXPORT_KERNEL(...)                                                                   \
  static ::phos::kernel::sim::Registration PHOS_KERNEL_CONCAT(phos_kernel_export_, __COUNTER__) { \
    ::phos::kernel::sim::KernelTag<&__VA_ARGS__> {}                                               \
  }
#if defined(PHOS_SIM_MODULE)
// The module itself (phos_add_kernel_module defines PHOS_SIM_MODULE): the variable, then its
// registration (which takes its address past the overloaded operator&).
#define PHOS_SIM_MODULE_VARIABLE(type, name, constant)                                                  \
  ::phos::kernel::ModuleVariable<type> name;                                                            \
  static ::phos::kernel::sim::VariableRegistration PHOS_KERNEL_CONCAT(phos_variable_export_, __COUNTER__) { \
    __builtin_addressof(name), constant                                                                 \
  }
#define PHOS_DEVICE_VARIABLE(type, name) PHOS_SIM_MODULE_VARIABLE(type, name, false)
#define PHOS_CONSTANT_VARIABLE(type, name) PHOS_SIM_MODULE_VARIABLE(type, name, true)
#else
// A host program that compiles the kernels to name them (their exported symbols): the variable
// is a host shadow of the declared type, as in nvcc's host code, whose exported symbol names the
// variable for cudaMemcpyToSymbol and cudaGetSymbolAddress.
#define PHOS_DEVICE_VARIABLE(type, name) __attribute__((visibility("default"))) ::phos::kernel::VariableType<type> name
#define PHOS_CONSTANT_VARIABLE(type, name) __attribute__((visibility("default"))) ::phos::kernel::VariableType<type> name
#endif

#endif
