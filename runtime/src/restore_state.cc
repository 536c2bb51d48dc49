#include "restore_state.h"

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/runtime/context_scope.h"
#include "phos/store/dram_tier.h"
#include "proto/manifest.pb.h"

namespace phos::runtime {
namespace {

// Hands everything `p` holds to its lease's scrub, then returns the lease.
void Release(DriverTable& driver, RestoreState::Prepared& p) {
  p.loader.reset();  // waits for its copies and unguards before the memory goes
  if (!p.lease) return;
  ctxpool::TenantResources& tenant = p.lease->tenant();
  for (auto& [vid, s] : p.streams) tenant.streams.push_back(s);
  for (auto& [vid, e] : p.events) tenant.events.push_back(e);
  for (auto& [vid, h] : p.blas) {
    if (vid != p.pooled_blas_vid) tenant.blas_handles.push_back(h);
  }
  if (p.space != nullptr && p.space->borrowed()) {
    ContextScope scope(driver, p.lease->context());
    Status s = p.space->ZeroAndUnmapAll();
    if (!s.ok()) PHOS_LOG(Warn, "restore", "instance range not scrubbed: {}", s.message());
    p.space.reset();
  }
  if (p.space != nullptr) {
    AddressSpaceRelease released = p.space->Release();
    for (const auto& m : released.mappings) tenant.mappings.push_back({m.base, m.bytes, m.handle});
    if (released.range_bytes != 0) tenant.address_ranges.push_back({released.range_base, released.range_bytes});
  }
  p = {};
}

}  // namespace

RestoreState::RestoreState(SessionPlan plan, DriverTable* driver, ctxpool::ContextPool* pool, int device,
                           uint64_t va_bytes, CUdeviceptr slot_base)
    : plan_(std::move(plan)), driver_(driver), pool_(pool), device_(device), va_bytes_(va_bytes), slot_base_(slot_base) {
  times_.issued = Clock::now();
  if (plan_.learn_first_touch && plan_.manifest != nullptr) {
    learning_ = true;
    ranks_.assign(plan_.manifest->buffers_size(), -1);
  }
  if (plan_.manifest != nullptr) EnsureStarted();
}

void RestoreState::EnsureStarted() {
  std::lock_guard lock(mu_);
  if (worker_.joinable() || done_) return;
  worker_ = std::thread([this] {
    Status s = Prepare();
    std::lock_guard done_lock(mu_);
    status_ = s;
    times_.prepared = Clock::now();
    done_ = true;
    done_cv_.notify_all();
  });
}

RestoreState::~RestoreState() {
  if (worker_.joinable()) worker_.join();
  Release(*driver_, prepared_);
}

Status RestoreState::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) {
    return Status::Timeout(fmt::format("restore not prepared within {} ms", timeout.count()));
  }
  return status_;
}

RestoreState::Prepared RestoreState::Take() {
  std::lock_guard lock(mu_);
  return std::move(prepared_);
}

RestoreState::Times RestoreState::times() const {
  std::lock_guard lock(mu_);
  return times_;
}

void RestoreState::MarkConnected() {
  std::lock_guard lock(mu_);
  times_.connected = Clock::now();
}

void RestoreState::MarkFirstLaunch() {
  std::lock_guard lock(mu_);
  if (times_.first_launch == Clock::time_point{}) times_.first_launch = Clock::now();
}

bool RestoreState::learning() const {
  std::lock_guard lock(mu_);
  return learning_;
}

void RestoreState::NoteTouch(int index) {
  std::lock_guard lock(mu_);
  if (!learning_ || index < 0 || static_cast<size_t>(index) >= ranks_.size() || ranks_[index] >= 0) return;
  ranks_[index] = next_rank_++;
}

std::vector<int32_t> RestoreState::TakeFirstTouch() {
  std::lock_guard lock(mu_);
  if (!learning_) return {};
  learning_ = false;
  return std::move(ranks_);
}

Status RestoreState::Prepare() {
  Prepared p;
  Result<ctxpool::ContextLease> lease = plan_.fresh_context ? pool_->LeaseFresh() : pool_->Lease();
  if (!lease.ok()) return lease.status().WithContext("restore: lease a context");
  p.lease.emplace(std::move(*lease));
  {
    std::lock_guard lock(mu_);
    times_.leased = Clock::now();
  }
  if (plan_.manifest == nullptr && slot_base_ != 0) {
    // A deploy's session: its allocations go to the slot, where a restore will find them again.
    Result<std::unique_ptr<InstanceAddressSpace>> space = InstanceAddressSpace::Reserve(
        driver_, {.range_bytes = va_bytes_, .base = slot_base_, .device = device_, .borrowed = true});
    if (!space.ok()) {
      Release(*driver_, p);
      return space.status().WithContext("deploy session");
    }
    p.space = std::move(*space);
  }
  if (plan_.manifest != nullptr) {
    Status s = MapBuffers(p);
    if (s.ok()) s = RecreateHandles(p);
    if (s.ok()) {
      RestoreLoaderOptions options{.driver = driver_,
                                   .context = p.lease->context(),
                                   .manifest = plan_.manifest.get(),
                                   .source = plan_.source,
                                   .dram = plan_.dram,
                                   .first_touch_order = plan_.first_touch_order,
                                   .name = fmt::format("{} v{}", plan_.manifest->function(), plan_.manifest->version())};
      {
        std::lock_guard lock(mu_);
        times_.loading = Clock::now();
      }
      Result<std::unique_ptr<RestoreLoader>> loader = RestoreLoader::Start(options);
      if (loader.ok()) {
        p.loader = std::move(*loader);
        if (plan_.stop_the_world) s = p.loader->Wait();
      } else {
        s = loader.status();
      }
    }
    if (!s.ok()) {
      Release(*driver_, p);
      return s.WithContext(fmt::format("restore {} v{}", plan_.manifest->function(), plan_.manifest->version()));
    }
  }
  std::lock_guard lock(mu_);
  prepared_ = std::move(p);
  return Status::Ok();
}

Status RestoreState::MapBuffers(Prepared& p) {
  const store::proto::Manifest& m = *plan_.manifest;
  if (m.buffers_size() == 0) return Status::Ok();
  if (m.va_base() == 0 || m.va_bytes() == 0) {
    return Status::FailedPrecondition("the snapshot's buffers do not come from an instance address space");
  }
  if (slot_base_ == 0 || m.va_base() != slot_base_ || m.va_bytes() != va_bytes_) {
    return Status::FailedPrecondition(fmt::format(
        "the snapshot's range [{:#x}, +{}) is not the instance range slot the restore was given ({:#x})", m.va_base(),
        m.va_bytes(), slot_base_));
  }
  PHOS_ASSIGN_OR_RETURN(p.space, InstanceAddressSpace::Reserve(driver_, {.range_bytes = m.va_bytes(),
                                                                         .base = m.va_base(),
                                                                         .device = device_,
                                                                         .borrowed = true}));
  for (int i = 0; i < m.buffers_size(); ++i) {
    const store::proto::Buffer& b = m.buffers(i);
    PHOS_RETURN_IF_ERROR(p.space->MapAt(b.device_address(), b.size())
                             .WithContext(fmt::format("map buffer {} ({}) at {:#x}", i, b.label(), b.device_address())));
    p.buffers.emplace_back(b.device_address(), b.size());
  }
  return Status::Ok();
}

Status RestoreState::RecreateHandles(Prepared& p) {
  const store::proto::Manifest& m = *plan_.manifest;
  DriverTable& d = *driver_;
  ContextScope scope(d, p.lease->context());
  if (!scope.ok()) return Status::Internal("the leased context cannot be made current");
  for (const auto& s : m.streams()) {
    CUstream stream = nullptr;
    PHOS_CU_RETURN_IF_ERROR(d.error_text(), d.cuStreamCreate(&stream, s.flags()));
    p.streams[s.handle()] = stream;
    p.stream_flags[s.handle()] = s.flags();
  }
  for (const auto& e : m.events()) {
    CUevent event = nullptr;
    PHOS_CU_RETURN_IF_ERROR(d.error_text(), d.cuEventCreate(&event, e.flags()));
    p.events[e.handle()] = event;
    p.event_flags[e.handle()] = e.flags();
  }
  for (const auto& h : m.library_handles()) {
    if (h.library() != "cublas") return Status::NotSupported("library handle of " + h.library());
    if (!d.has_cublas()) return Status::FailedPrecondition("the snapshot holds cuBLAS handles and the driver has no cuBLAS");
    cublasHandle_t handle = nullptr;
    // The first is served by the lease's pooled handle, as the function's first cublasCreate was.
    if (p.pooled_blas_vid == 0) {
      handle = p.lease->blas_handle();
      p.pooled_blas_vid = h.handle();
    } else if (d.cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      return Status::DeviceError(fmt::format("cublasCreate for handle {}", h.handle()));
    }
    p.blas[h.handle()] = handle;
    CUstream stream = nullptr;
    if (h.stream() == 2) {
      stream = CU_STREAM_PER_THREAD;
    } else if (h.stream() > 2) {
      auto it = p.streams.find(h.stream());
      if (it == p.streams.end()) return Status::Corruption(fmt::format("cuBLAS handle {} names stream {}, not in the snapshot", h.handle(), h.stream()));
      stream = it->second;
    }
    if (d.cublasSetStream(handle, reinterpret_cast<cudaStream_t>(stream)) != CUBLAS_STATUS_SUCCESS ||
        d.cublasSetMathMode(handle, static_cast<cublasMath_t>(h.math_mode())) != CUBLAS_STATUS_SUCCESS) {
      return Status::DeviceError(fmt::format("cuBLAS handle {}: settings not restored", h.handle()));
    }
  }
  p.next_handle = m.next_handle();
  return Status::Ok();
}

}  // namespace phos::runtime
