// Guarded device ranges (phosSimGuardRange): device memory made inaccessible (PROT_NONE) without
// losing its contents, so that a kernel or copy touching it faults and the fault can be told apart
// from a bad access. phos uses this to validate the read/write sets it speculates while buffers
// are still being restored (docs/design.md D8): absent buffers are guarded, a touch outside the speculated
// set traps, and exec/access_guard decides what happens then.
//
// mprotect keeps the pages of both kinds of device memory: linear allocations are private
// anonymous mappings, VMM mappings are shared memfd mappings; neither loses data when its
// protection changes.
//
// Process-wide (simulated devices share one address space). Guard, Unguard, Forget and Reprotect
// are serialised by a mutex; Contains is lock-free and async-signal-safe, for the fault handler.
#pragma once

#include <cuda.h>
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace phos::sim {

class GuardTable {
 public:
  // Guarded ranges at once; each splits the process's mappings (vm.max_map_count is 65530 by
  // default), and the fault handler scans them linearly.
  static constexpr size_t kCapacity = 8192;

  static GuardTable& Global();

  // The host page size: guarded ranges start and end on it.
  static uint64_t PageSize();

  // Makes [start, start + bytes) PROT_NONE (`prot`: PROT_READ guards writes only). start and bytes
  // are multiples of PageSize(), bytes > 0; the caller has checked that the range is read-write
  // device memory.
  // CUDA_ERROR_INVALID_VALUE: misaligned, or overlapping a guarded range.
  // CUDA_ERROR_OUT_OF_MEMORY: kCapacity ranges are guarded already, or mprotect failed (the
  // process's map count is exhausted).
  CUresult Guard(uintptr_t start, uint64_t bytes, int prot = PROT_NONE);
  // Makes a range given exactly as guarded read-write again. CUDA_ERROR_INVALID_VALUE when no
  // guarded range is [start, start + bytes).
  CUresult Unguard(uintptr_t start, uint64_t bytes);
  // Unguards the guarded range containing address, if any; false when there is none.
  bool UnguardContaining(uintptr_t address);
  // Forgets, without touching protections, every guarded range overlapping [start, start + len):
  // its memory is being freed or unmapped; a later allocation at the same address starts
  // unguarded.
  void Forget(uintptr_t start, uint64_t len);
  // Gives [start, start + len) (page-aligned start) the protection `prot` (PROT_*), which replaces
  // the guard of every guarded range overlapping it. The protection is applied before the guards
  // are forgotten, under the mutex: an access that faults meanwhile is a guard fault, whose
  // service waits for the change and then runs the access again under the new protection (as
  // Unguard makes pages accessible before clearing their slot), instead of an access to memory
  // that is inaccessible and unguarded, which fails as an illegal address. The guards go even if
  // mprotect fails (the protection is unknown then; keeping a guard would let a later unguard make
  // the range read-write). CUDA_ERROR_OUT_OF_MEMORY when mprotect failed.
  CUresult Reprotect(uintptr_t start, uint64_t len, int prot);

  // Whether address lies in a guarded range. Lock-free and async-signal-safe; a range being
  // guarded or unguarded concurrently may or may not be seen.
  bool Contains(uintptr_t address) const;
  // Whether any guarded range overlaps [start, start + bytes) (under the mutex).
  bool Overlaps(uintptr_t start, uint64_t bytes);
  // The guarded range containing address (under the mutex).
  bool FindContaining(uintptr_t address, uintptr_t* start, uint64_t* bytes);
  size_t size();

  // Tests only: called by Reprotect (under the mutex) just before it applies the new protection,
  // so that a test can fault on the range at that moment.
  using ReprotectHook = void (*)(void* user, uintptr_t start, uint64_t bytes);
  void SetReprotectHookForTesting(ReprotectHook hook, void* user);

 private:
  // A free slot has start 0. Writers publish end before start and clear start before end, so a
  // reader that sees a start sees its end, or at worst a neighbouring range's (a torn read only
  // makes the fault handler consult the table again under the mutex).
  struct Slot {
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
  };
  // mu_ held.
  Slot* FindSlot(uintptr_t address);
  void Clear(Slot& slot);
  void ForgetLocked(uintptr_t start, uint64_t len);

  std::mutex mu_;
  size_t count_ = 0;
  // Slots in use all lie below it, so Contains scans only that far.
  std::atomic<size_t> high_water_{0};
  std::array<Slot, kCapacity> slots_;
  ReprotectHook reprotect_hook_ = nullptr;  // mu_
  void* reprotect_hook_user_ = nullptr;
};

// Writes bytes into device memory whatever its protection, without making it accessible to
// anything else meanwhile: through /proc/self/mem for private (linear) memory. The caller has
// checked the range. CUDA_ERROR_OPERATING_SYSTEM when the write fails (a kernel that forbids
// /proc/self/mem writes).
CUresult WriteThroughProcMem(uintptr_t dst, const void* src, uint64_t bytes);

}  // namespace phos::sim
