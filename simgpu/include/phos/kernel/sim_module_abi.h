/* The binary interface between a simgpu module (kernels compiled by g++ from phos/kernel.h
 * sources, see PhosModules.cmake) and the simgpu loader (simgpu/src/module). Plain C so that
 * neither side depends on the other's C++ ABI.
 *
 * A module is an x86-64 (host ISA) ELF shared object that exports one C function,
 * PHOS_SIM_MODULE_INFO_SYMBOL, returning a table that stays valid while the module is loaded.
 * The loader reads abi_version first and rejects any other version without reading further:
 * a change to any struct below, or to what a field means, bumps PHOS_SIM_MODULE_ABI_VERSION.
 */
#ifndef PHOS_KERNEL_SIM_MODULE_ABI_H_
#define PHOS_KERNEL_SIM_MODULE_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PHOS_SIM_MODULE_ABI_VERSION 2u
#define PHOS_SIM_MODULE_INFO_SYMBOL "phos_sim_module_info"

/* Grid and block extents of one launch, x first (as cuLaunchKernel's gridDimX..blockDimZ). */
typedef struct PhosSimLaunchGeometry {
  uint32_t grid[3];
  uint32_t block[3];
} PhosSimLaunchGeometry;

/* Runs the blocks with linear index in [first_block, end_block) of the grid, blockIdx.x varying
 * fastest, each block's threads one after another (threadIdx.x fastest). args[i] points at the
 * value of parameter i (cuLaunchKernel's kernelParams); it need not be aligned. Callers may run
 * disjoint ranges of one launch on several threads at once. */
typedef void (*PhosSimKernelEntry)(const PhosSimLaunchGeometry* geometry, void* const* args,
                                   uint64_t first_block, uint64_t end_block);

typedef struct PhosSimKernelInfo {
  /* The Itanium-mangled name nvcc gives the same kernel ("_Z7vec_addPKfS0_Pfi"); NULL when the
   * kernel has no exported symbol to take it from (internal linkage), which the loader rejects. */
  const char* name;
  PhosSimKernelEntry entry;
  uint32_t param_count;
  /* param_count entries each: where CUDA places parameter i in the kernel's parameter buffer
   * (the next offset aligned to the parameter's alignment) and its size in bytes. */
  const uint64_t* param_offsets;
  const uint64_t* param_sizes;
} PhosSimKernelInfo;

/* A module variable (PHOS_DEVICE_VARIABLE / PHOS_CONSTANT_VARIABLE: a __device__ or __constant__
 * variable under nvcc). Its bytes live in device memory that the loader allocates, zeroed, when
 * the module loads in a context; the module's code reaches them through *address, which the
 * loader sets before any kernel of the module runs (and the module never writes). */
typedef struct PhosSimVariableInfo {
  /* The variable's exported symbol: the name nvcc gives the same variable ("table",
   * "_ZN2ns5tableE"), which cuModuleGetGlobal looks up. NULL when it has none (internal
   * linkage), which the loader rejects. */
  const char* name;
  uint64_t size;       /* bytes, > 0 */
  uint64_t alignment;  /* a power of two */
  uint32_t constant;   /* 1: constant memory (__constant__), 0: global memory (__device__) */
  uint32_t reserved;   /* 0 */
  void** address;
} PhosSimVariableInfo;

typedef struct PhosSimModuleInfo {
  uint32_t abi_version; /* PHOS_SIM_MODULE_ABI_VERSION */
  uint32_t kernel_count;
  const PhosSimKernelInfo* kernels;
  uint32_t variable_count;
  uint32_t reserved; /* 0 */
  const PhosSimVariableInfo* variables;
} PhosSimModuleInfo;

/* The type of the exported PHOS_SIM_MODULE_INFO_SYMBOL. */
typedef const PhosSimModuleInfo* (*PhosSimModuleInfoFn)(void);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_KERNEL_SIM_MODULE_ABI_H_ */
