// A DeviceAccess without the driver, for testing cuBLAS (src/blas) and NCCL (src/nccl) alone:
// real executors and contexts from exec/, "device memory" that is whatever host buffers a test
// declares, and modelled costs recorded instead of slept.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "device/device_access.h"
#include "exec/executor.h"
#include "exec/model_clock.h"

namespace phos::sim::testing {

class FakeDeviceAccess final : public DeviceAccess {
 public:
  // `devices` devices with one compute worker each, modelled with `profile` (which must outlive
  // the fake).
  FakeDeviceAccess(int devices, const DeviceProfile& profile) : profile_(profile) {
    for (int d = 0; d < devices; ++d) {
      executors_.push_back(std::make_unique<Executor>(d, clock_, ExecutorOptions{1}));
    }
    primary_.resize(devices);
    primary_refs_.resize(devices, 0);
  }

  // A new context on `device`, made current.
  ContextRef CreateCurrentContext(int device) {
    std::lock_guard lock(mu_);
    current_ = NewContextLocked(device);
    return current_;
  }
  void ClearCurrentContext() {
    std::lock_guard lock(mu_);
    current_ = ContextRef{};
  }
  // What cuCtxDestroy does to the libraries' view: the context is no longer live.
  void DestroyContext(const ContextRef& ctx) {
    std::lock_guard lock(mu_);
    for (Entry& e : contexts_) {
      if (e.ref.id == ctx.id) e.live = false;
    }
  }
  // Declares [ptr, ptr + bytes) device memory of `device`.
  void AddMemory(const void* ptr, uint64_t bytes, int device) {
    std::lock_guard lock(mu_);
    memory_.push_back({reinterpret_cast<CUdeviceptr>(ptr), bytes, device});
  }

  std::vector<double> paid() const {
    std::lock_guard lock(mu_);
    return paid_;
  }
  int primary_refs(int device) const {
    std::lock_guard lock(mu_);
    return primary_refs_[device];
  }

  int device_count() const override { return static_cast<int>(executors_.size()); }
  bool HasCurrentContext() const override {
    std::lock_guard lock(mu_);
    return current_.exec != nullptr;
  }
  CUresult CurrentContext(ContextRef* out) override {
    std::lock_guard lock(mu_);
    if (current_.exec == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (!LiveLocked(current_)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = current_;
    return out->exec->sticky_error();
  }
  bool IsLive(const ContextRef& ctx) const override {
    std::lock_guard lock(mu_);
    return LiveLocked(ctx);
  }
  CUresult RetainPrimaryContext(int device, ContextRef* out) override {
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(mu_);
    if (primary_refs_[device]++ == 0) primary_[device] = NewContextLocked(device);
    *out = primary_[device];
    return CUDA_SUCCESS;
  }
  CUresult ReleasePrimaryContext(int device) override {
    if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(mu_);
    if (primary_refs_[device] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    --primary_refs_[device];
    return CUDA_SUCCESS;
  }
  CUresult ResolveStream(const ContextRef& ctx, CUstream handle, std::shared_ptr<Stream>* out) override {
    if (handle != nullptr) return CUDA_ERROR_INVALID_HANDLE;  // the fake has only NULL streams
    *out = ctx.exec->null_stream();
    return CUDA_SUCCESS;
  }
  bool CheckRange(CUdeviceptr ptr, uint64_t bytes, Access needed, int* device) const override {
    if (needed == Access::kNone) return false;
    std::lock_guard lock(mu_);
    for (const Range& r : memory_) {
      if (ptr >= r.ptr && bytes <= r.bytes && ptr - r.ptr <= r.bytes - bytes) {
        if (device != nullptr) *device = r.device;
        return true;
      }
    }
    return false;
  }
  void PayModelledCost(double device_seconds) override {
    std::lock_guard lock(mu_);
    paid_.push_back(device_seconds);
  }

 private:
  struct Entry {
    ContextRef ref;
    bool live = true;
  };
  struct Range {
    CUdeviceptr ptr;
    uint64_t bytes;
    int device;
  };

  ContextRef NewContextLocked(int device) {
    ContextRef ctx;
    ctx.id = ++last_id_;
    ctx.handle = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(ctx.id << 4));
    ctx.device = device;
    ctx.profile = &profile_;
    ctx.exec = executors_[device]->CreateContext();
    contexts_.push_back({ctx, true});
    return ctx;
  }
  bool LiveLocked(const ContextRef& ctx) const {
    for (const Entry& e : contexts_) {
      if (e.ref.id == ctx.id) return e.live;
    }
    return false;
  }

  const DeviceProfile& profile_;
  ModelClock clock_;
  // Declared before every ContextRef: a context's execution state waits for its work on its
  // executor when it goes, so the executors go last.
  std::vector<std::unique_ptr<Executor>> executors_;
  mutable std::mutex mu_;
  std::vector<Entry> contexts_;
  std::vector<ContextRef> primary_;
  std::vector<int> primary_refs_;
  ContextRef current_;
  std::vector<Range> memory_;
  std::vector<double> paid_;
  uint64_t last_id_ = 0;
};

}  // namespace phos::sim::testing
