// The g++ side of phos/kernel.h: the CUDA device built-ins a kernel sees when it runs in a simgpu
// module. Include phos/kernel.h, not this header. What is and is not provided, and why, is listed
// at the top of phos/kernel.h.
#pragma once

#if defined(__CUDACC__)
#error "phos/kernel/sim_device.h is for g++ builds of simgpu modules; nvcc provides the built-ins"
#endif

#include <math.h>
#include <stdint.h>

// Marks what must stay private to one loaded module. Hidden symbols are local to their shared
// object, so two modules (or two loads of one image) never share them; without it, C++ inline
// variables are emitted as STB_GNU_UNIQUE and glibc would bind every module to one instance.
#define PHOS_KERNEL_PRIVATE __attribute__((visibility("hidden")))

// The same layout, names and (so) mangled names as CUDA's vector_types.h, which a g++ build need
// not have. If that header came first, its types are used.
#ifndef __VECTOR_TYPES_H__
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
#endif

// Everything below is private to the module. (Not the types above: a template kernel instantiated
// on a hidden type would be hidden too, and could not be found by its name.)
#pragma GCC visibility push(hidden)

// Set by the block runner (sim_registry.h) before each simulated thread. Thread-local because the
// worker threads of a launch run different blocks, and different launches, at the same time.
// Hidden by attribute, not only by the pragma: GCC then uses the local-dynamic TLS model, one
// __tls_get_addr per kernel call rather than one per variable.
PHOS_KERNEL_PRIVATE inline thread_local uint3 threadIdx{0, 0, 0};
PHOS_KERNEL_PRIVATE inline thread_local uint3 blockIdx{0, 0, 0};
PHOS_KERNEL_PRIVATE inline thread_local dim3 blockDim{1, 1, 1};
PHOS_KERNEL_PRIVATE inline thread_local dim3 gridDim{1, 1, 1};
inline constexpr int warpSize = 32;

namespace phos::kernel::sim {

// Never true: makes a static_assert fire only where the template holding it is instantiated.
template <typename... T>
inline constexpr bool kNotAvailable = false;

// Reads, updates and compare-and-swaps until no other thread intervened; returns the old value.
// CUDA's atomics are relaxed, and so are these.
template <typename T, typename Update>
inline T AtomicUpdate(T* address, Update update) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = update(old);
  while (!__atomic_compare_exchange(address, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    desired = update(old);
  }
  return old;
}

template <typename T>
inline T AtomicCas(T* address, T compare, T val) {
  __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}

}  // namespace phos::kernel::sim

// ---- Atomics (CUDA C++ Programming Guide, "Atomic Functions"): each returns the old value. ----
inline int atomicAdd(int* address, int val) {
  return __atomic_fetch_add(address, val, __ATOMIC_RELAXED);
}
inline unsigned int atomicAdd(unsigned int* address, unsigned int val) {
  return __atomic_fetch_add(address, val, __ATOMIC_RELAXED);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long val) {
  return __atomic_fetch_add(address, val, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* address, float val) {
  return phos::kernel::sim::AtomicUpdate(address, [val](float old) { return old + val; });
}
inline double atomicAdd(double* address, double val) {
  return phos::kernel::sim::AtomicUpdate(address, [val](double old) { return old + val; });
}
inline int atomicSub(int* address, int val) {
  return __atomic_fetch_sub(address, val, __ATOMIC_RELAXED);
}
inline unsigned int atomicSub(unsigned int* address, unsigned int val) {
  return __atomic_fetch_sub(address, val, __ATOMIC_RELAXED);
}
inline int atomicExch(int* address, int val) {
  return __atomic_exchange_n(address, val, __ATOMIC_RELAXED);
}
inline unsigned int atomicExch(unsigned int* address, unsigned int val) {
  return __atomic_exchange_n(address, val, __ATOMIC_RELAXED);
}
inline unsigned long long atomicExch(unsigned long long* address, unsigned long long val) {
  return __atomic_exchange_n(address, val, __ATOMIC_RELAXED);
}
inline float atomicExch(float* address, float val) {
  float old;
  __atomic_exchange(address, &val, &old, __ATOMIC_RELAXED);
  return old;
}
inline int atomicMax(int* address, int val) {
  return phos::kernel::sim::AtomicUpdate(address, [val](int old) { return old > val ? old : val; });
}
inline unsigned int atomicMax(unsigned int* address, unsigned int val) {
  return phos::kernel::sim::AtomicUpdate(address, [val](unsigned int old) { return old > val ? old : val; });
}
inline unsigned long long atomicMax(unsigned long long* address, unsigned long long val) {
  return phos::kernel::sim::AtomicUpdate(address,
                                         [val](unsigned long long old) { return old > val ? old : val; });
}
inline int atomicMin(int* address, int val) {
  return phos::kernel::sim::AtomicUpdate(address, [val](int old) { return old < val ? old : val; });
}
inline unsigned int atomicMin(unsigned int* address, unsigned int val) {
  return phos::kernel::sim::AtomicUpdate(address, [val](unsigned int old) { return old < val ? old : val; });
}
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long val) {
  return phos::kernel::sim::AtomicUpdate(address,
                                         [val](unsigned long long old) { return old < val ? old : val; });
}
inline int atomicCAS(int* address, int compare, int val) {
  return phos::kernel::sim::AtomicCas(address, compare, val);
}
inline unsigned int atomicCAS(unsigned int* address, unsigned int compare, unsigned int val) {
  return phos::kernel::sim::AtomicCas(address, compare, val);
}
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare,
                                    unsigned long long val) {
  return phos::kernel::sim::AtomicCas(address, compare, val);
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// ---- Math. CUDA declares these in the global namespace for device code; the fast-math
// intrinsics are exact here. glibc's <math.h> already declares __expf, __logf and __powf
// (noexcept) without exporting them, hence the matching noexcept definitions. ----
inline float rsqrtf(float x) noexcept {
  return 1.0f / sqrtf(x);
}
inline double rsqrt(double x) noexcept {
  return 1.0 / sqrt(x);
}
inline float __expf(float x) noexcept {
  return expf(x);
}
inline float __logf(float x) noexcept {
  return logf(x);
}
inline float __powf(float x, float y) noexcept {
  return powf(x, y);
}
inline float __fdividef(float x, float y) noexcept {
  return x / y;
}
inline float __saturatef(float x) noexcept {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline unsigned int min(unsigned int a, unsigned int b) {
  return a < b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline unsigned long long min(unsigned long long a, unsigned long long b) {
  return a < b ? a : b;
}
inline float min(float a, float b) {
  return fminf(a, b);
}
inline double min(double a, double b) {
  return fmin(a, b);
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned int max(unsigned int a, unsigned int b) {
  return a > b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
inline unsigned long long max(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}
inline float max(float a, float b) {
  return fmaxf(a, b);
}
inline double max(double a, double b) {
  return fmax(a, b);
}

// ---- Block-level cooperation: not available (see phos/kernel.h). ----
#define PHOS_KERNEL_NOT_AVAILABLE(name, why)                                                       \
  template <typename... PhosArgs>                                                                  \
  inline void name(PhosArgs...) {                                                                  \
    static_assert(::phos::kernel::sim::kNotAvailable<PhosArgs...>,                                 \
                  #name " is not available in simgpu modules (g++ build of a phos kernel): " why); \
  }
#define PHOS_KERNEL_NO_BARRIER \
  "the threads of a block run one after another on one CPU thread, so a barrier cannot be met"
#define PHOS_KERNEL_NO_WARP "warps do not run in lockstep in simgpu; write the kernel without warp intrinsics"
PHOS_KERNEL_NOT_AVAILABLE(__syncthreads, PHOS_KERNEL_NO_BARRIER)
PHOS_KERNEL_NOT_AVAILABLE(__syncthreads_count, PHOS_KERNEL_NO_BARRIER)
PHOS_KERNEL_NOT_AVAILABLE(__syncthreads_and, PHOS_KERNEL_NO_BARRIER)
PHOS_KERNEL_NOT_AVAILABLE(__syncthreads_or, PHOS_KERNEL_NO_BARRIER)
PHOS_KERNEL_NOT_AVAILABLE(__syncwarp, PHOS_KERNEL_NO_BARRIER)
PHOS_KERNEL_NOT_AVAILABLE(__shfl_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__shfl_up_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__shfl_down_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__shfl_xor_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__ballot_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__any_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__all_sync, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__activemask, PHOS_KERNEL_NO_WARP)
PHOS_KERNEL_NOT_AVAILABLE(__match_any_sync, PHOS_KERNEL_NO_WARP)
#undef PHOS_KERNEL_NO_WARP
#undef PHOS_KERNEL_NO_BARRIER
#undef PHOS_KERNEL_NOT_AVAILABLE

#pragma GCC visibility pop

// Shared memory is only useful with a barrier; a declaration stops the build here.
#ifndef __shared__
#define __shared__                                                                      \
  static_assert(::phos::kernel::sim::kNotAvailable<>,                                   \
                "__shared__ memory is not available in simgpu modules (g++ build of a " \
                "phos kernel): the threads of a block cannot synchronise on it");
#endif
