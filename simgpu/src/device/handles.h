// Opaque handles as table entries: the driver's (CUcontext, CUstream, CUevent, CUmodule,
// CUfunction), cuBLAS's (cublasHandle_t), cuBLASLt's (handles, matmul descriptors, matrix layouts,
// preferences) and NCCL's (ncclComm_t).
//
// A handle is never a pointer to the object: it encodes a kind tag and an id that is never
// reused. So a garbage, stale or wrong-kind handle is a failed lookup (CUDA_ERROR_INVALID_HANDLE
// and friends), never a dereference of freed memory, and a destroyed context can be told apart
// from one that never existed.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace phos::sim {

// One enumeration for every library's handles, so that no handle of one kind decodes as another.
enum class HandleKind : uint64_t {
  kContext = 1,
  kStream = 2,
  kEvent = 3,
  kModule = 4,
  kFunction = 5,
  kGraph = 6,
  kGraphNode = 7,
  kGraphExec = 8,
  kBlasHandle = 0x40,
  kNcclComm = 0x41,
  kBlasLtHandle = 0x42,
  kBlasLtMatmulDesc = 0x43,
  kBlasLtMatrixLayout = 0x44,
  kBlasLtPreference = 0x45,
};

template <typename T, typename Handle, HandleKind kKind>
class HandleTable {
 public:
  // Adds `object` and returns its new handle.
  Handle Insert(std::shared_ptr<T> object) {
    std::unique_lock lock(mu_);
    uint64_t id = ++last_id_;
    objects_.emplace(id, std::move(object));
    return Encode(id);
  }

  // The object behind `handle`, or nullptr when it is not a live handle of this kind.
  std::shared_ptr<T> Find(Handle handle) const {
    uint64_t id = 0;
    if (!Decode(handle, &id)) return nullptr;
    std::shared_lock lock(mu_);
    auto it = objects_.find(id);
    return it == objects_.end() ? nullptr : it->second;
  }

  // Removes `handle`; returns its object, or nullptr when it was not live.
  std::shared_ptr<T> Remove(Handle handle) {
    uint64_t id = 0;
    if (!Decode(handle, &id)) return nullptr;
    std::unique_lock lock(mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    objects_.erase(it);
    return object;
  }

  // True when `handle` is of this kind and was issued once, live or not.
  bool WasIssued(Handle handle) const {
    uint64_t id = 0;
    if (!Decode(handle, &id)) return false;
    std::shared_lock lock(mu_);
    return id <= last_id_;
  }

  // Handles of the live objects for which `pred(object)` holds.
  template <typename Pred>
  std::vector<Handle> Select(Pred pred) const {
    std::shared_lock lock(mu_);
    std::vector<Handle> out;
    for (const auto& [id, object] : objects_) {
      if (pred(*object)) out.push_back(Encode(id));
    }
    return out;
  }

 private:
  // Layout of a handle value: kind in bits 56-63, id in bits 4-55, low bits zero (aligned like
  // a pointer, and never 0, 1 or 2, which CUDA reserves for the NULL, legacy and per-thread
  // streams).
  static constexpr int kKindShift = 56;
  static constexpr int kIdShift = 4;
  static constexpr uint64_t kIdMask = (1ull << (kKindShift - kIdShift)) - 1;

  static Handle Encode(uint64_t id) {
    return reinterpret_cast<Handle>(static_cast<uintptr_t>(static_cast<uint64_t>(kKind) << kKindShift |
                                                           id << kIdShift));
  }
  static bool Decode(Handle handle, uint64_t* id) {
    auto v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
    if ((v >> kKindShift) != static_cast<uint64_t>(kKind) || (v & ((1ull << kIdShift) - 1)) != 0) return false;
    *id = (v >> kIdShift) & kIdMask;
    return *id != 0;
  }

  mutable std::shared_mutex mu_;
  uint64_t last_id_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<T>> objects_;
};

}  // namespace phos::sim
