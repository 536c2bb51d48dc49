#include "restore_state.h"

#include <utility>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/driver/physical_memory.h"
#include "phos/runtime/snapshot_restore.h"
#include "phos/store/dram_tier.h"

namespace phos::runtime {
namespace {

// A device's share of an instance range: device d of a session of `gpus` owns
// [base + d * share, + share), whole GiB so that every driver's granularity divides it.
uint64_t DeviceShare(uint64_t range_bytes, int gpus) {
  constexpr uint64_t kGiB = 1ull << 30;
  return gpus <= 1 ? range_bytes : range_bytes / static_cast<uint64_t>(gpus) / kGiB * kGiB;
}

}  // namespace

void RestoreState::Release(driver::DriverTable& driver, Prepared& p) {
  p.loaders.clear();  // each waits for its copies and unguards before the memory goes
  if (!p.lease && !p.group) return;
  auto tenant = [&](int device) -> ctxpool::TenantResources& {
    return p.group ? p.group->tenant(device) : p.lease->tenant();
  };
  auto device_of = [&](uint64_t vid) {
    auto it = p.handle_devices.find(vid);
    return it == p.handle_devices.end() ? 0 : it->second;
  };
  for (auto& [vid, s] : p.streams) tenant(device_of(vid)).streams.push_back(s);
  for (auto& [vid, e] : p.events) tenant(device_of(vid)).events.push_back(e);
  for (auto& [vid, h] : p.blas) {
    if (vid != p.pooled_blas_vid) tenant(device_of(vid)).blas_handles.push_back(h);
  }
  if (p.lease) {
    // Loaded for the function the lease was made for: kept for its next instance.
    p.lease->KeepModules(p.lease->modules_owner(), std::move(p.modules));
  } else {
    for (auto& [hash, m] : p.modules) tenant(0).modules.push_back(m);
  }
  for (auto& [device, space] : p.spaces) {
    if (space == nullptr) continue;
    if (space->borrowed()) {
      driver::ContextScope scope(driver, p.context(device));
      Status s = space->ZeroAndUnmapAll();
      if (!s.ok()) PHOS_LOG(Warn, "restore", "instance range not scrubbed: {}", s.message());
      continue;
    }
    driver::ContextScope scope(driver, p.context(device));  // Release waits for the context's work
    AddressSpaceRelease released = space->Release();
    for (const auto& m : released.mappings) tenant(device).mappings.push_back({m.base, m.bytes, m.handle});
    if (released.range_bytes != 0) tenant(device).address_ranges.push_back({released.range_base, released.range_bytes});
  }
  p = {};
}

RestoreState::RestoreState(SessionPlan plan, driver::DriverTable* driver, ctxpool::ContextPool* pool,
                           ctxpool::CommunicatorPool* groups, LoadPriority* priority, SharedBuffers* shares,
                           int device, uint64_t va_bytes, CUdeviceptr slot_base)
    : plan_(std::move(plan)),
      driver_(driver),
      pool_(pool),
      groups_(groups),
      priority_(priority),
      shares_(shares),
      device_(device),
      va_bytes_(va_bytes),
      slot_base_(slot_base) {
  times_.issued = Clock::now();
  if (plan_.learn_first_touch && plan_.manifest != nullptr) {
    learning_ = true;
    ranks_.assign(plan_.manifest->buffers.size(), -1);
    written_.assign(plan_.manifest->buffers.size(), false);
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
  cancel_.store(true);
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

uint64_t RestoreState::modules_loaded() const {
  std::lock_guard lock(mu_);
  return modules_loaded_;
}

void RestoreState::NoteModuleLoaded() {
  std::lock_guard lock(mu_);
  ++modules_loaded_;
}

bool RestoreState::learning() const {
  std::lock_guard lock(mu_);
  return learning_;
}

void RestoreState::NoteTouch(int index, bool written) {
  std::lock_guard lock(mu_);
  if (!learning_ || index < 0 || static_cast<size_t>(index) >= ranks_.size()) return;
  if (ranks_[index] < 0) ranks_[index] = next_rank_++;
  if (written) written_[index] = true;
}

void RestoreState::NoteEveryBufferWritten() {
  std::lock_guard lock(mu_);
  if (learning_) written_.assign(written_.size(), true);
}

LearnedUsage RestoreState::TakeLearnedUsage() {
  std::lock_guard lock(mu_);
  if (!learning_) return {};
  learning_ = false;
  return {.first_touch = std::move(ranks_), .written = std::move(written_)};
}

Status RestoreState::Prepare() {
  Prepared p;
  Status s = Lease(p);
  if (s.ok()) {
    std::lock_guard lock(mu_);
    times_.leased = Clock::now();
  }
  if (s.ok()) TakeKeptModules(p);
  if (s.ok()) s = ReserveSpaces(p);
  if (s.ok() && plan_.manifest != nullptr) {
    s = MapBuffers(p);
    if (s.ok()) s = RecreateHandles(p);
    if (s.ok()) s = StartLoaders(p);
    if (s.ok()) PreloadModules(p);
    if (!s.ok())
      s = s.WithContext(fmt::format("restore {} v{}", plan_.manifest->function, plan_.manifest->version));
  }
  if (!s.ok()) {
    Release(*driver_, p);
    return s;
  }
  std::lock_guard lock(mu_);
  prepared_ = std::move(p);
  return Status::Ok();
}

Status RestoreState::Lease(Prepared& p) {
  if (plan_.gpus > 1) {
    // No fresh-group variant: device groups always come from the pool (docs/decisions.md).
    if (groups_ == nullptr) return Status::FailedPrecondition("no device groups (NCCL) for a session of several GPUs");
    Result<ctxpool::DeviceGroupLease> group = groups_->Lease(plan_.gpus, &cancel_);
    if (!group.ok()) return group.status().WithContext("restore: lease a device group");
    p.group.emplace(std::move(*group));
    return Status::Ok();
  }
  // A miss waits for the context on its way (a scrub or a creation), as long as that takes: the
  // restore is abandoned (cancel_) if nobody wants it any more.
  // Leased for the function: a context where its earlier instance kept its modules comes first.
  if (pool_ == nullptr) return Status::InvalidArgument(fmt::format("restore: the node has no device {}", device_));
  Result<ctxpool::ContextLease> lease = plan_.fresh_context ? pool_->LeaseFresh() : pool_->Lease(&cancel_, function());
  if (!lease.ok()) return lease.status().WithContext("restore: lease a context");
  {
    std::lock_guard lock(mu_);
    times_.pool_wait = lease->waited();
  }
  p.lease.emplace(std::move(*lease));
  return Status::Ok();
}

Status RestoreState::ReserveSpaces(Prepared& p) {
  if (slot_base_ == 0) return Status::Ok();  // the session reserves its own range, if any
  // The slot is shared out between the devices; each device's memory is carved from its share.
  const int gpus = std::max(plan_.gpus, 1);
  const uint64_t share = DeviceShare(va_bytes_, gpus);
  if (share == 0) return Status::InvalidArgument("instance range too small for the session's devices");
  for (int d = 0; d < gpus; ++d) {
    const int physical = p.group ? d : device_;
    PHOS_ASSIGN_OR_RETURN(p.spaces[d], InstanceAddressSpace::Reserve(
                                           driver_, {.range_bytes = share,
                                                     .base = slot_base_ + share * static_cast<uint64_t>(d),
                                                     .device = physical,
                                                     .borrowed = true}));
  }
  return Status::Ok();
}

Status RestoreState::MapBuffers(Prepared& p) {
  const store::Manifest& m = *plan_.manifest;
  if (std::max(m.gpus, 1) != std::max(plan_.gpus, 1)) {
    return Status::FailedPrecondition(fmt::format("the snapshot uses {} device(s), the session {}",
                                                  std::max(m.gpus, 1), std::max(plan_.gpus, 1)));
  }
  if (m.buffers.empty()) return Status::Ok();
  if (slot_base_ == 0 || m.va_base != slot_base_ || m.va_bytes != va_bytes_) {
    return Status::FailedPrecondition(fmt::format(
        "the snapshot's range [{:#x}, +{}) is not the instance range slot the restore was given ({:#x})",
        m.va_base, m.va_bytes, slot_base_));
  }
  // Read-only buffers are shared (docs/design.md D14), except by the learning restore (the classes
  // are not known yet) and by the modes that copy everything (the baselines that do not share).
  const bool may_share =
      shares_ != nullptr && !plan_.learn_first_touch && !plan_.stop_the_world && shares_->Enabled(m.function);
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const store::Buffer& b = m.buffers[i];
    auto space = p.spaces.find(b.device);
    if (space == p.spaces.end() || space->second == nullptr) {
      return Status::Corruption(
          fmt::format("buffer {} is on device {}, not one of the session's", i, b.device));
    }
    const std::string what = fmt::format("map buffer {} ({}) at {:#x}", i, b.label, b.device_address);
    p.buffers.push_back({b.device_address, b.size, b.device});
    InstanceAddressSpace& s = *space->second;
    // Only a buffer with whole granules of its own can be mapped from another allocation.
    const bool shareable = may_share && b.access_class == store::AccessClass::kReadOnly &&
                           b.size >= s.granularity() && s.Contains(b.device_address) &&
                           (b.device_address - s.base()) % s.granularity() == 0;
    if (!shareable) {
      PHOS_RETURN_IF_ERROR(s.MapAt(b.device_address, b.size).WithContext(what));
      continue;
    }
    const std::string content = SharedBuffers::ContentKey(b);
    const uint64_t reserved = (b.size + s.granularity() - 1) / s.granularity() * s.granularity();
    if (CUmemGenericAllocationHandle h = shares_->Acquire(s.device(), content, reserved); h != 0) {
      PHOS_RETURN_IF_ERROR(s.MapSharedAt(b.device_address, b.size, h, shares_, content).WithContext(what));
      p.shared.insert(static_cast<int>(i));
      p.shared_bytes += b.size;
      p.shared_by_address[b.device_address] = {
          .content = content, .device = b.device, .physical = s.device()};
      continue;
    }
    PHOS_RETURN_IF_ERROR(s.MapAt(b.device_address, b.size).WithContext(what));
    InstanceAddressSpace::ShareableMapping mapping;
    if (s.RegisterShared(b.device_address, shares_, content, &mapping)) {
      auto state = std::make_shared<Prepared::PublishState>();
      p.publish[static_cast<int>(i)] = {mapping, content, state};
      p.shared_by_address[b.device_address] = {.content = content,
                                               .device = b.device,
                                               .physical = s.device(),
                                               .handle = mapping.handle,
                                               .publish = state};
    }
  }
  if (!p.shared.empty()) {
    PHOS_LOG(Info, "restore", "{} v{}: {} read-only buffers ({} bytes) mapped from shared allocations",
             m.function, m.version, p.shared.size(), p.shared_bytes);
  }
  return Status::Ok();
}

Status RestoreState::RecreateHandles(Prepared& p) {
  const store::Manifest& m = *plan_.manifest;
  driver::DriverTable& d = *driver_;
  const int gpus = std::max(plan_.gpus, 1);
  auto check_device = [&](int device, const char* what, uint64_t handle) -> Status {
    if (device < 0 || device >= gpus) {
      return Status::Corruption(fmt::format("{} {} is on device {}, not one of the session's", what, handle, device));
    }
    if (device != 0) p.handle_devices[handle] = device;
    return Status::Ok();
  };
  for (const store::StreamState& s : m.streams) {
    PHOS_RETURN_IF_ERROR(check_device(s.device, "stream", s.handle));
    driver::ContextScope scope(d, p.context(s.device));
    CUstream stream = nullptr;
    PHOS_CU_RETURN_IF_ERROR(d.error_text(), d.cuStreamCreateWithPriority(&stream, s.flags, s.priority));
    p.streams[s.handle] = stream;
    p.stream_flags[s.handle] = s.flags;
    p.stream_priorities[s.handle] = s.priority;
  }
  for (const store::EventState& e : m.events) {
    PHOS_RETURN_IF_ERROR(check_device(e.device, "event", e.handle));
    driver::ContextScope scope(d, p.context(e.device));
    CUevent event = nullptr;
    PHOS_CU_RETURN_IF_ERROR(d.error_text(), d.cuEventCreate(&event, e.flags));
    p.events[e.handle] = event;
    p.event_flags[e.handle] = e.flags;
  }
  for (const store::LibraryHandle& h : m.library_handles) {
    if (h.library != "cublas") return Status::NotSupported("library handle of " + h.library);
    if (!d.has_cublas()) return Status::FailedPrecondition("the snapshot holds cuBLAS handles and the driver has no cuBLAS");
    PHOS_RETURN_IF_ERROR(check_device(h.device, "cuBLAS handle", h.handle));
    driver::ContextScope scope(d, p.context(h.device));
    cublasHandle_t handle = nullptr;
    // The first of device 0 is served by the pooled handle, as the function's first cublasCreate was.
    if (p.pooled_blas_vid == 0 && h.device == 0) {
      handle = p.group ? p.group->blas_handle(0) : p.lease->blas_handle();
      p.pooled_blas_vid = h.handle;
    } else if (d.cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      return Status::DeviceError(fmt::format("cublasCreate for handle {}", h.handle));
    }
    p.blas[h.handle] = handle;
    CUstream stream = nullptr;
    if (h.stream == 2) {
      stream = CU_STREAM_PER_THREAD;
    } else if (h.stream > 2) {
      auto it = p.streams.find(h.stream);
      if (it == p.streams.end())
        return Status::Corruption(
            fmt::format("cuBLAS handle {} names stream {}, not in the snapshot", h.handle, h.stream));
      stream = it->second;
    }
    if (d.cublasSetStream(handle, reinterpret_cast<cudaStream_t>(stream)) != CUBLAS_STATUS_SUCCESS ||
        d.cublasSetMathMode(handle, static_cast<cublasMath_t>(h.math_mode)) != CUBLAS_STATUS_SUCCESS) {
      return Status::DeviceError(fmt::format("cuBLAS handle {}: settings not restored", h.handle));
    }
  }
  for (const store::NcclCommState& c : m.nccl_comms) {
    if (!p.group || c.device < 0 || c.device >= p.group->size()) {
      return Status::Corruption(
          fmt::format("communicator {} names device {} outside the session's group", c.handle, c.device));
    }
    p.comms[c.handle] = {p.group->comm(c.device), c.device};
  }
  p.next_handle = m.next_handle;
  return Status::Ok();
}

const std::string& RestoreState::function() const {
  return plan_.function.empty() && plan_.manifest != nullptr ? plan_.manifest->function : plan_.function;
}

void RestoreState::TakeKeptModules(Prepared& p) {
  if (!p.lease) return;
  p.modules = p.lease->TakeKeptModules();
}

void RestoreState::PreloadModules(Prepared& p) {
  const store::Manifest& m = *plan_.manifest;
  ctxpool::ModulesByHash kept = std::exchange(p.modules, {});
  driver::ContextScope scope(*driver_, p.context(0));
  uint64_t loaded = 0;
  for (size_t i = 0; i < m.modules.size(); ++i) {
    std::string hash = m.modules[i].content_hash.ToBytes();
    if (p.modules.contains(hash)) continue;  // the same image twice: one module serves both
    if (auto it = kept.find(hash); it != kept.end()) {
      // Its globals hold what the function's last instance left there: the snapshot's go back.
      Status written = WriteModuleGlobals(driver_, m.modules[i], it->second);
      if (written.ok()) {
        p.modules.insert(kept.extract(it));
        continue;
      }
      PHOS_LOG(Warn, "restore", "{} v{}: kept module {} not used: {}", m.function, m.version, i, written.message());
    }
    uint64_t bytes = 0;
    Result<CUmodule> module = LoadSnapshotModule(driver_, m, static_cast<int>(i), *plan_.source, &bytes);
    if (!module.ok()) {
      PHOS_LOG(Warn, "restore", "{} v{}: module {} not preloaded: {}", m.function, m.version, i,
               module.status().message());
      continue;
    }
    p.modules[hash] = *module;
    ++loaded;
  }
  for (auto& [hash, module] : kept) p.lease->tenant().modules.push_back(module);
  std::lock_guard lock(mu_);
  modules_loaded_ += loaded;
}

Status RestoreState::StartLoaders(Prepared& p) {
  const store::Manifest& m = *plan_.manifest;
  const int gpus = std::max(plan_.gpus, 1);
  {
    std::lock_guard lock(mu_);
    times_.loading = Clock::now();
  }
  p.loaders.resize(gpus);
  for (int device = 0; device < gpus; ++device) {
    DeviceLoader& dl = p.loaders[device];
    dl.manifest = std::make_unique<store::Manifest>(m);
    dl.manifest->buffers.clear();
    // Published once loaded: by loader index.
    std::map<int, Prepared::Publish> publish;
    for (size_t i = 0; i < m.buffers.size(); ++i) {
      if (m.buffers[i].device != device || p.shared.count(static_cast<int>(i)) != 0) continue;
      if (auto it = p.publish.find(static_cast<int>(i)); it != p.publish.end()) {
        publish[static_cast<int>(dl.global.size())] = it->second;
      }
      dl.manifest->buffers.push_back(m.buffers[i]);
      dl.global.push_back(static_cast<int>(i));
    }
    std::function<bool(int, bool)> on_ready;
    if (!publish.empty()) {
      on_ready = [driver = driver_, shares = shares_, publish = std::move(publish)](int index, bool clean) {
        auto it = publish.find(index);
        if (it == publish.end()) return false;
        const InstanceAddressSpace::ShareableMapping& sm = it->second.mapping;
        Prepared::PublishState& state = *it->second.state;
        std::lock_guard lock(state.mu);
        if (state.withdrawn) return false;  // a call of the session writes it: its own
        if (!clean) {
          // Something the function ran touched a buffer before it was loaded: it may have written
          // this one, so it is not handed to anybody.
          state.withdrawn = true;
          shares->Withdraw(sm.device, it->second.content, sm.handle);
          PHOS_LOG(Info, "restore", "allocation at {:#x} not shared: a speculation miss while it loaded",
                   sm.address);
          return false;
        }
        // From guarded straight to read-only, for this instance too: nothing can have written it
        // since its bytes landed, and a write the speculation misses from now on faults here rather
        // than changing what others read.
        const CUresult r =
            driver::SetDeviceAccess(*driver, sm.address, sm.bytes, sm.device, CU_MEM_ACCESS_FLAGS_PROT_READ);
        if (r != CUDA_SUCCESS) {
          PHOS_LOG(Warn, "restore", "shared allocation at {:#x} not made read-only (CUresult {}): not shared",
                   sm.address, static_cast<int>(r));
          state.withdrawn = true;
          shares->Withdraw(sm.device, it->second.content, sm.handle);
          return false;
        }
        state.published = shares->MarkResident(sm.device, it->second.content, sm.handle);
        if (!state.published) {
          // No longer registered: handed to nobody, so this instance's own, and its writes (which
          // the session's copy-on-write then lets through) must not fault.
          state.withdrawn = true;
          const CUresult rw =
              driver::SetDeviceAccess(*driver, sm.address, sm.bytes, sm.device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
          if (rw != CUDA_SUCCESS) {
            PHOS_LOG(Warn, "restore", "allocation at {:#x} not made writable again (CUresult {})", sm.address,
                     static_cast<int>(rw));
          }
        }
        return true;
      };
    }
    RestoreLoaderOptions options{.driver = driver_,
                                 .context = p.context(device),
                                 .manifest = dl.manifest.get(),
                                 .source = plan_.source,
                                 .dram = plan_.dram,
                                 .first_touch_order = plan_.first_touch_order,
                                 .priority = priority_,
                                 .urgent = plan_.urgent,
                                 .name = fmt::format("{} v{} device {}", m.function, m.version, device),
                                 .on_ready = std::move(on_ready)};
    PHOS_ASSIGN_OR_RETURN(dl.loader, RestoreLoader::Start(options));
  }
  if (plan_.stop_the_world) {
    for (DeviceLoader& dl : p.loaders) PHOS_RETURN_IF_ERROR(dl.loader->Wait());
  }
  return Status::Ok();
}

}  // namespace phos::runtime
