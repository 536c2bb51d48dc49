// Read-only buffers held once on a device (docs/design.md D14): buffers a snapshot's manifest
// marks read-only (learned from the sample request's speculated write sets) are mapped read-only
// from one physical allocation into every instance range that restores them, instead of each
// instance copying its own. Keyed by content: a buffer's size and chunk list (same chunks, same
// bytes), so instances of one function and functions whose snapshots share those chunks (the
// fine-tunes of one base) share one allocation.
//
// Life of an allocation: the first restore that needs a content and finds none registers its own
// freshly mapped allocation (Register) and loads it as usual; once its last byte landed it maps it
// read-only and marks it resident (MarkResident). Later restores take a reference (Acquire) and
// map it read-only at their address, copying nothing. Each instance drops its reference when its
// range is unmapped (Drop); the last one zeroes and releases the memory. A restore that finds the
// content registered but still loading loads a private copy: waiting would hold up its request.
//
// Thread-safe.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "phos/store/manifest.h"

namespace phos::runtime {

class SharedBuffers {
 public:
  struct Stats {
    uint64_t allocations = 0;   // registered allocations, resident or loading
    uint64_t bytes = 0;         // their physical bytes
    uint64_t references = 0;    // instance mappings of them
    uint64_t shared_bytes = 0;  // bytes restores mapped from a resident allocation instead of copying
    uint64_t disabled_functions = 0;
    uint64_t private_copies = 0;  // copy-on-write: instances that took a private copy before a write
  };

  // The content key of a snapshot buffer: its size and chunk ids.
  static std::string ContentKey(const store::Buffer& buffer);

  // The resident allocation of `content` on `device` with one more reference taken (the caller maps
  // it, `bytes` of it, read-only); 0 when there is none or it is still loading.
  CUmemGenericAllocationHandle Acquire(int device, const std::string& content, uint64_t bytes);
  // Registers `handle`, `bytes` of physical memory the caller has just mapped and will load, as
  // `content`'s allocation, the caller holding its first reference. False when `content` has one
  // already: the caller keeps its allocation private.
  bool Register(int device, const std::string& content, CUmemGenericAllocationHandle handle, uint64_t bytes);
  // Every byte of `content`'s allocation `handle` is loaded: Acquire hands it out from now on.
  // False when `handle` is not (any more) the registered one.
  bool MarkResident(int device, const std::string& content, CUmemGenericAllocationHandle handle);
  // The registrant of `content`'s allocation `handle` will write it before it was handed out
  // (copy-on-write of a buffer still loading): the entry goes, and the allocation is the
  // registrant's own again. False, changing nothing, when it is resident already (then it must
  // make a private copy) or `handle` is not the registered one (withdrawn before, and the content
  // registered since by another allocation, which stays registered).
  bool Withdraw(int device, const std::string& content, CUmemGenericAllocationHandle handle);
  // Drops one reference to `content`'s allocation `handle`. True when it was the last: the entry
  // is gone, and the caller, whose mapping is the last, owns the handle (zeroes, unmaps and
  // releases it); true as well when `handle` is not (any more) the registered one (withdrawn).
  bool Drop(int device, const std::string& content, CUmemGenericAllocationHandle handle);

  // Copy-on-write with the caller's reference to `content`'s allocation `handle` the only one:
  // the entry goes and the allocation is the caller's own, to write in place (true; true as well
  // when `handle` is not (any more) the registered one). False, changing nothing, while other
  // instances hold references: the caller must make a private copy.
  bool ClaimSole(int device, const std::string& content, CUmemGenericAllocationHandle handle);

  // A write the speculation missed faulted on a shared mapping of `function`'s: its later restores
  // load private copies (D14's fallback). Counted in Stats.
  void Disable(const std::string& function);
  // Counts a copy-on-write (an instance's private copy of a shared buffer before a call writes it).
  void CountPrivateCopy();
  bool Enabled(const std::string& function) const;

  Stats stats() const;

 private:
  struct Entry {
    CUmemGenericAllocationHandle handle = 0;
    uint64_t bytes = 0;
    int references = 0;
    bool resident = false;
  };
  using Key = std::pair<int, std::string>;

  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  std::set<std::string> disabled_;
  uint64_t shared_bytes_ = 0;
  uint64_t private_copies_ = 0;
};

}  // namespace phos::runtime
