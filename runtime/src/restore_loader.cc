// The restore loader's streaming side: guard units, the background thread under its window,
// Require on the priority stream, retiring copies, and the single all-resident flip.
#include <fmt/format.h>

#include <bit>

#include "phos/base/fault_point.h"
#include "phos/driver/cuda_check.h"
#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/runtime/va_allocator.h"
#include "phos/store/reader.h"
#include "restore_loader_impl.h"

namespace phos::runtime {
namespace {

using Clock = std::chrono::steady_clock;
// Guarded ranges are a simgpu extension (DriverTable::has_guards(); NVIDIA's driver has none), so
// their granule is simgpu's: phosSimGuardRange guards whole 4 KiB pages (phos/simgpu/simgpu.h),
// and simgpu has no call that reports it.
constexpr uint64_t kSimgpuGuardGranule = 4096;

}  // namespace

void LoadPriority::BeginUrgent() {
  std::lock_guard lock(mu_);
  ++urgent_;
}

void LoadPriority::EndUrgent() {
  std::lock_guard lock(mu_);
  --urgent_;
  cv_.notify_all();
}

bool LoadPriority::Busy() const {
  std::lock_guard lock(mu_);
  return urgent_ > 0;
}

void LoadPriority::WaitForUrgent(const std::atomic<bool>& stop) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return urgent_ == 0 || stop.load(); });
}

void LoadPriority::Wake() {
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

Status RestoreLoader::Impl::Init(const RestoreLoaderOptions& o) {
  const driver::CuErrorText& text = d_->error_text();
  const int n = static_cast<int>(manifest_->buffers.size());
  buffers_.resize(n);
  for (int i = 0; i < n; ++i) {
    const store::Buffer& mb = manifest_->buffers[i];
    Buffer& b = buffers_[i];
    b.address = mb.device_address;
    b.size = mb.size;
    b.label = mb.label;
    b.name = b.label.empty() ? fmt::format("buffer {} at {:#x}", i, b.address)
                             : fmt::format("buffer {} '{}' at {:#x}", i, b.label, b.address);
    uint64_t offset = 0;
    for (const store::ChunkRef& ref : mb.chunks) {
      b.chunks.push_back({ref, offset});
      offset += ref.size;
      max_chunk_ = std::max(max_chunk_, ref.size);
    }
    if (b.size == 0 || offset != b.size) {
      return Status::InvalidArgument(
          fmt::format("restore {}: {} has {} bytes, its chunks {}", snapshot_, b.name, b.size, offset));
    }
    b.done.assign(b.chunks.size(), false);
    by_address_.emplace_back(b.address, i);
  }
  std::sort(by_address_.begin(), by_address_.end());
  for (size_t k = 0; k < by_address_.size(); ++k) {
    const Buffer& b = buffers_[by_address_[k].second];
    if (k > 0) {
      const Buffer& prev = buffers_[by_address_[k - 1].second];
      if (prev.address + prev.size > b.address) {
        return Status::InvalidArgument(
            fmt::format("restore {}: {} overlaps {}", snapshot_, b.name, prev.name));
      }
    }
    const uint64_t lo = AlignDown(b.address, kSimgpuGuardGranule);
    const uint64_t hi = AlignUp(b.address + b.size, kSimgpuGuardGranule);
    if (units_.empty() || lo >= units_.back().base + units_.back().bytes) {
      units_.push_back({.base = lo, .bytes = hi - lo});
    } else {
      units_.back().bytes = std::max<uint64_t>(units_.back().bytes, hi - units_.back().base);
    }
    units_.back().buffers.push_back(by_address_[k].second);
    ++units_.back().absent;
    buffers_[by_address_[k].second].unit = static_cast<int>(units_.size()) - 1;
  }
  if (o.first_touch_order) {
    for (uint32_t i : store::FirstTouchOrder(*manifest_)) order_.push_back(static_cast<int>(i));
  } else {
    for (const auto& [address, i] : by_address_) order_.push_back(i);
  }

  driver::ContextScope scope(*d_, ctx_);
  if (!scope.ok()) return Status::DeviceError(fmt::format("restore {}: cuCtxPushCurrent failed", snapshot_));
  // The loader is given a context, not a device: the granularity is the same on every device of a
  // node (one GPU model), so device 0's serves.
  PHOS_ASSIGN_OR_RETURN(granule_, DeviceMemoryGranularity(*d_, 0, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  PHOS_CU_RETURN_IF_ERROR(text, d_->cuStreamCreate(&background_stream_, CU_STREAM_NON_BLOCKING));
  // simgpu has no stream priorities (and the driver table no cuStreamCreateWithPriority): the
  // priority stream jumps the queue because the window keeps the background stream short.
  PHOS_CU_RETURN_IF_ERROR(text, d_->cuStreamCreate(&priority_stream_, CU_STREAM_NON_BLOCKING));

  if (units_.empty()) {
    all_resident_->store(true, std::memory_order_release);
    return Status::Ok();
  }
  if (o.guard && d_->has_guards()) {
    PHOS_RETURN_IF_ERROR(RegisterForFaults());
    guard_ = true;
    guarded_copy_ = d_->phosSimMemcpyHtoDAsyncGuarded != nullptr;
    for (Unit& u : units_) {
      const CUresult res = d_->phosSimGuardRange(u.base, u.bytes);
      if (res != CUDA_SUCCESS) {
        // Validation only: the restore itself does not need guards.
        PHOS_LOG(
            Warn, "restore", "{}: {}; restoring without validation", name_,
            driver::CuStatus(res, fmt::format("phosSimGuardRange [{:#x}, +{})", u.base, u.bytes), text).message());
        for (Unit& g : units_) UnguardLocked(g);
        guard_ = false;
        break;
      }
      u.guarded = true;
    }
  }
  PHOS_LOG(Info, "restore", "{}: loading {} buffers in {} units ({} order, {})", name_, buffers_.size(),
           units_.size(), o.first_touch_order ? "first-touch" : "address",
           !guard_         ? "unguarded"
           : guarded_copy_ ? "guarded copies"
                           : "guarded until first chunk");
  if (priority_ != nullptr && urgent_) {
    priority_->BeginUrgent();
    counted_urgent_ = true;
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void RestoreLoader::Impl::EndUrgentLocked() {
  if (!counted_urgent_) return;
  counted_urgent_ = false;
  priority_->EndUrgent();
}

RestoreLoader::Impl::~Impl() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    EndUrgentLocked();
  }
  stopping_.store(true);
  if (priority_ != nullptr) priority_->Wake();
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
  driver::ContextScope scope(*d_, ctx_);
  auto drain = [&] {
    if (background_stream_ != nullptr) d_->cuStreamSynchronize(background_stream_);
    if (priority_stream_ != nullptr) d_->cuStreamSynchronize(priority_stream_);
  };
  drain();
  {
    std::lock_guard lock(mu_);
    for (Unit& u : units_) UnguardLocked(u);
  }
  Unregister();  // waits for a handler still running on our buffers; it may have enqueued copies
  drain();
  std::lock_guard lock(mu_);
  for (Copy& c : in_flight_) Drop(c.data);
  in_flight_.clear();
  for (CUevent e : all_events_) d_->cuEventDestroy(e);
  for (CUstream s : {background_stream_, priority_stream_}) {
    if (s != nullptr) d_->cuStreamDestroy(s);
  }
  for (void* p : all_staging_) d_->cuMemFreeHost(p);
}

int RestoreLoader::Impl::UnitOf(CUdeviceptr address) const {
  auto it = std::upper_bound(units_.begin(), units_.end(), address,
                             [](CUdeviceptr a, const Unit& u) { return a < u.base; });
  if (it == units_.begin()) return -1;
  --it;
  return address < it->base + it->bytes ? static_cast<int>(it - units_.begin()) : -1;
}

int RestoreLoader::Impl::Find(CUdeviceptr address) const {
  auto it = std::upper_bound(by_address_.begin(), by_address_.end(), address,
                             [](CUdeviceptr a, const std::pair<CUdeviceptr, int>& b) { return a < b.first; });
  if (it == by_address_.begin()) return -1;
  --it;
  const Buffer& b = buffers_[it->second];
  return address < b.address + b.size ? it->second : -1;
}

bool RestoreLoader::Impl::IsResident(int index) const {
  if (index < 0 || index >= static_cast<int>(buffers_.size())) return false;
  std::lock_guard lock(mu_);
  return buffers_[index].ready;
}

Result<RestoreLoader::Impl::ChunkData> RestoreLoader::Impl::Fetch(const Chunk& chunk) {
  ChunkData out;
  if (dram_ != nullptr) {
    auto lease = dram_->Lease(chunk.ref);
    if (lease.ok()) {
      out.lease = std::move(*lease);
      return out;
    }
    // A chunk larger than a slot, or every slot held: read through the tier into staging.
    const StatusCode code = lease.status().code();
    if (code != StatusCode::kOutOfMemory && code != StatusCode::kInvalidArgument) return lease.status();
  }
  {
    std::lock_guard lock(staging_mu_);
    if (!free_staging_.empty()) {
      out.staging = free_staging_.back();
      free_staging_.pop_back();
    }
  }
  if (out.staging == nullptr) {
    driver::ContextScope scope(*d_, ctx_);
    PHOS_RETURN_IF_ERROR(driver::CuStatus(d_->cuMemHostAlloc(&out.staging, max_chunk_, CU_MEMHOSTALLOC_PORTABLE),
                                  "cuMemHostAlloc (staging)", d_->error_text()));
    std::lock_guard lock(staging_mu_);
    all_staging_.push_back(out.staging);
  }
  Status read = source_->ReadChunk(chunk.ref, out.staging);
  if (!read.ok()) {
    Drop(out);
    return read;
  }
  return out;
}

void RestoreLoader::Impl::Drop(ChunkData& data) {
  data.lease.Release();
  if (data.staging != nullptr) {
    std::lock_guard lock(staging_mu_);
    free_staging_.push_back(data.staging);
    data.staging = nullptr;
  }
}

Result<CUevent> RestoreLoader::Impl::TakeEventLocked() {
  if (!free_events_.empty()) {
    CUevent e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  PHOS_RETURN_IF_ERROR(
      driver::CuStatus(d_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate", d_->error_text()));
  all_events_.push_back(e);
  return e;
}

Status RestoreLoader::Impl::EnqueueLocked(int buffer, size_t chunk, ChunkData data, bool background) {
  Buffer& b = buffers_[buffer];
  Unit& u = units_[b.unit];
  // Without the guarded copy, a unit must be open before its first byte lands: the weaker check.
  if (u.guarded && !guarded_copy_) UnguardLocked(u);
  const Chunk& c = b.chunks[chunk];
  const CUstream stream = background ? background_stream_ : priority_stream_;
  const CUdeviceptr dst = b.address + c.offset;
  // A copy engine finishes the copy it started: a required load issued meanwhile waits for it. The
  // background's copies are cut in pieces so that this wait is short; required loads go whole.
  const uint64_t piece = background ? std::min(granule_, background_piece_) : granule_;
  const CUresult res = ForEachPiece(dst, data.data(), c.ref.size, piece,
                                    [&](CUdeviceptr to, const void* from, size_t n) {
                                      return u.guarded ? d_->phosSimMemcpyHtoDAsyncGuarded(to, from, n, stream)
                                                       : d_->cuMemcpyHtoDAsync(to, from, n, stream);
                                    });
  Status s =
      driver::CuStatus(res, u.guarded ? "phosSimMemcpyHtoDAsyncGuarded" : "cuMemcpyHtoDAsync", d_->error_text());
  Result<CUevent> done = s.ok() ? TakeEventLocked() : Result<CUevent>(s);
  if (done.ok()) s = driver::CuStatus(d_->cuEventRecord(*done, stream), "cuEventRecord", d_->error_text());
  if (!s.ok() || !done.ok()) {
    Drop(data);
    return ChunkError(buffer, chunk, s.ok() ? done.status() : s);
  }
  in_flight_.push_back(
      {.done = *done, .buffer = buffer, .chunk = chunk, .background = background, .data = std::move(data)});
  if (background) {
    background_bytes_ += c.ref.size;
    ++b.background_in_flight;
  } else {
    ++required_in_flight_;
  }
  return Status::Ok();
}

Status RestoreLoader::Impl::RetireLocked() {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    const CUresult res = d_->cuEventQuery(it->done);
    if (res == CUDA_ERROR_NOT_READY) {
      ++it;
      continue;
    }
    if (res != CUDA_SUCCESS) {
      return ChunkError(it->buffer, it->chunk, driver::CuStatus(res, "copy to the device", d_->error_text()));
    }
    FinishLocked(*it);
    it = in_flight_.erase(it);
  }
  return Status::Ok();
}

void RestoreLoader::Impl::FinishLocked(Copy& copy) {
  Drop(copy.data);  // the lease is held until the copy from its slot completed
  free_events_.push_back(copy.done);
  Buffer& b = buffers_[copy.buffer];
  if (copy.background) {
    background_bytes_ -= b.chunks[copy.chunk].ref.size;
    --b.background_in_flight;
  } else {
    --required_in_flight_;
  }
  ChunkDoneLocked(copy.buffer, copy.chunk);
}

void RestoreLoader::Impl::ChunkDoneLocked(int buffer, size_t chunk) {
  Buffer& b = buffers_[buffer];
  if (b.done[chunk]) return;  // written from the CPU by a copy-engine miss first
  b.done[chunk] = true;
  loaded_bytes_ += b.chunks[chunk].ref.size;
  FaultPoint("restore-load");  // a chunk on the device, the restore not done
  if (++b.completed < b.chunks.size()) return;
  b.ready = true;
  ready_order_.push_back(buffer);
  Unit& u = units_[b.unit];
  if (--u.absent > 0) return;
  if (on_ready_) {
    bool access_set = false;
    for (int i : u.buffers) access_set = on_ready_(i, misses_ == 0) || access_set;
    // Its new access replaced the guard (simgpu drops a guard that cuMemSetAccess covers).
    if (access_set) u.guarded = false;
  }
  UnguardLocked(u);
  if (++ready_units_ < units_.size()) return;
  fully_resident_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  all_resident_->store(true, std::memory_order_release);
  EndUrgentLocked();
  PHOS_LOG(Info, "restore", "{}: fully resident after {:.1f} ms ({} bytes, {} required, {} misses)", name_,
           fully_resident_ms_, loaded_bytes_, required_, misses_);
  done_.notify_all();
  work_.notify_all();
}

void RestoreLoader::Impl::UnguardLocked(Unit& u) {
  if (!u.guarded) return;
  u.guarded = false;
  const CUresult res = d_->phosSimUnguardRange(u.base, u.bytes);
  if (res != CUDA_SUCCESS) {
    PHOS_LOG(Warn, "restore", "{}: phosSimUnguardRange [{:#x}, +{}): error {}", name_, u.base, u.bytes,
             static_cast<int>(res));
  }
}

void RestoreLoader::Impl::FailLocked(Status why) {
  if (!failed_.ok()) return;
  PHOS_LOG(Warn, "restore", "{}: {}", name_, why.ToString());
  failed_ = std::move(why);
  EndUrgentLocked();
  done_.notify_all();
}

void RestoreLoader::Impl::Run() {
  driver::ContextScope scope(*d_, ctx_);
  std::unique_lock lock(mu_);
  if (!scope.ok())
    FailLocked(Status::DeviceError(fmt::format("restore {}: cuCtxPushCurrent failed", snapshot_)));
  size_t cursor = 0;
  while (!stop_ && failed_.ok() && ready_units_ < units_.size()) {
    Status retired = RetireLocked();
    if (!retired.ok()) {
      FailLocked(retired);
      break;
    }
    while (cursor < order_.size() &&
           buffers_[order_[cursor]].claimed == buffers_[order_[cursor]].chunks.size()) {
      ++cursor;
    }
    const bool more = background_ && cursor < order_.size();
    const int b = more ? order_[cursor] : -1;
    const size_t k = more ? buffers_[b].claimed : 0;
    const bool window_open =
        more && (background_bytes_ == 0 || background_bytes_ + buffers_[b].chunks[k].ref.size <= window_);
    // Required loads have the link to themselves: the background issues nothing new while a
    // requirer reads its chunks or its copies are in flight (a copy engine serves copies in the
    // order they become ready, so a chunk issued now would go between theirs).
    const bool yielding = requiring_ > 0 || required_in_flight_ > 0;
    if (window_open && priority_ != nullptr && !urgent_ && priority_->Busy()) {
      // A restore a request waits for is loading: nothing new from this one meanwhile.
      lock.unlock();
      priority_->WaitForUrgent(stopping_);
      lock.lock();
      continue;
    }
    if (window_open && !yielding) {
      const Chunk chunk = buffers_[b].chunks[k];
      lock.unlock();
      auto data = Fetch(chunk);
      lock.lock();
      if (!data.ok()) {
        FailLocked(ChunkError(b, k, data.status()));
        break;
      }
      if (stop_ || buffers_[b].claimed != k) {  // a requirer took it meanwhile
        Drop(*data);
        continue;
      }
      buffers_[b].claimed = k + 1;
      Status s = EnqueueLocked(b, k, std::move(*data), /*background=*/true);
      if (!s.ok()) FailLocked(s);
      continue;
    }
    if (in_flight_.empty()) {
      work_.wait(lock);  // a requirer is reading chunks it claimed; it notifies once they are enqueued
      continue;
    }
    // Sleep on a copy's event: the oldest required one while yielding to them, else the oldest
    // background one when the window is what holds us back.
    CUevent wait_on = in_flight_.front().done;
    if (more) {
      for (const Copy& c : in_flight_) {
        if (c.background != yielding) {
          wait_on = c.done;
          break;
        }
      }
    }
    lock.unlock();
    d_->cuEventSynchronize(wait_on);  // an error shows in the next cuEventQuery
    lock.lock();
  }
}

Result<CUevent> RestoreLoader::Impl::RequireUnitLocked(int unit, std::unique_lock<std::mutex>& lock) {
  Unit& u = units_[unit];
  std::vector<std::pair<int, size_t>> claims;
  bool behind_background = false;
  for (int b : u.buffers) {
    Buffer& buf = buffers_[b];
    behind_background |= buf.background_in_flight > 0;
    for (size_t k = buf.claimed; k < buf.chunks.size(); ++k) claims.emplace_back(b, k);
    buf.claimed = buf.chunks.size();
  }
  // Reads happen unlocked so that the background stream keeps flowing; the claims keep the
  // background thread off these chunks meanwhile.
  std::vector<ChunkData> data(claims.size());
  ++requiring_;
  lock.unlock();
  Status read;
  for (size_t i = 0; i < claims.size() && read.ok(); ++i) {
    auto got = Fetch(buffers_[claims[i].first].chunks[claims[i].second]);
    if (got.ok()) {
      data[i] = std::move(*got);
    } else {
      read = ChunkError(claims[i].first, claims[i].second, got.status());
    }
  }
  lock.lock();
  --requiring_;  // the copies below (or the failure) take over from here
  if (!read.ok()) {
    for (ChunkData& c : data) Drop(c);
    FailLocked(read);
    return read;
  }
  const driver::CuErrorText& text = d_->error_text();
  for (CUevent* e : {&u.event, &u.background}) {
    if (*e != nullptr) continue;
    Result<CUevent> made = TakeEventLocked();
    if (!made.ok()) {
      for (ChunkData& c : data) Drop(c);
      FailLocked(made.status());
      return made.status();
    }
    *e = *made;
  }
  // Never let a background copy land after the application wrote the buffer: the priority
  // stream, and so whoever waits on the unit's event, waits for the unit's background copies.
  Status s;
  if (behind_background) {
    s = driver::CuStatus(d_->cuEventRecord(u.background, background_stream_), "cuEventRecord", text);
    if (s.ok())
      s = driver::CuStatus(d_->cuStreamWaitEvent(priority_stream_, u.background, 0), "cuStreamWaitEvent", text);
  }
  for (size_t i = 0; i < claims.size(); ++i) {
    if (s.ok()) {
      s = EnqueueLocked(claims[i].first, claims[i].second, std::move(data[i]), /*background=*/false);
    } else {
      Drop(data[i]);
    }
  }
  if (s.ok()) s = driver::CuStatus(d_->cuEventRecord(u.event, priority_stream_), "cuEventRecord", text);
  work_.notify_all();
  if (!s.ok()) {
    FailLocked(s);
    return s;
  }
  u.event_covers_all = true;
  return u.event;
}

Result<CUevent> RestoreLoader::Impl::Require(int index) {
  if (index < 0 || index >= static_cast<int>(buffers_.size())) {
    return Status::InvalidArgument(
        fmt::format("restore {}: no buffer {} (the snapshot has {})", snapshot_, index, buffers_.size()));
  }
  driver::ContextScope scope(*d_, ctx_);
  if (!scope.ok()) return Status::DeviceError(fmt::format("restore {}: cuCtxPushCurrent failed", snapshot_));
  std::lock_guard require(require_mu_);
  std::unique_lock lock(mu_);
  if (!failed_.ok()) return failed_;
  buffers_[index].required = true;
  const int unit = buffers_[index].unit;
  if (units_[unit].absent == 0) return static_cast<CUevent>(nullptr);
  ++required_;
  if (units_[unit].event_covers_all) return units_[unit].event;
  return RequireUnitLocked(unit, lock);
}

Status RestoreLoader::Impl::Wait() {
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return ready_units_ == units_.size() || !failed_.ok(); });
  return failed_;
}

RestoreLoaderStats RestoreLoader::Impl::Stats() const {
  std::lock_guard lock(mu_);
  // Copies the device finished that the background thread has not retired yet count too: the
  // bytes are there (the stage headers sample this the moment an answer begins).
  uint64_t landed = 0;
  for (const Copy& c : in_flight_) {
    const Buffer& b = buffers_[c.buffer];
    if (!b.done[c.chunk] && d_->cuEventQuery(c.done) == CUDA_SUCCESS) landed += b.chunks[c.chunk].ref.size;
  }
  return {.buffers = buffers_.size(),
          .bytes = loaded_bytes_ + landed,
          .required = required_,
          .misses = misses_,
          .last_miss = last_miss_,
          .all_resident = ready_units_ == units_.size(),
          .ready_order = ready_order_,
          .fully_resident_ms = fully_resident_ms_};
}

Result<std::unique_ptr<RestoreLoader>> RestoreLoader::Start(const RestoreLoaderOptions& options) {
  std::vector<std::string> missing;
  if (options.driver == nullptr) missing.emplace_back("driver");
  if (options.context == nullptr) missing.emplace_back("context");
  if (options.manifest == nullptr) missing.emplace_back("manifest");
  if (options.source == nullptr) missing.emplace_back("source");
  if (!missing.empty()) {
    return Status::InvalidArgument(fmt::format("restore loader: missing {}", fmt::join(missing, ", ")));
  }
  if (options.dram != nullptr && static_cast<store::ChunkSource*>(options.dram) != options.source) {
    return Status::InvalidArgument("restore loader: dram must be the source itself (or null)");
  }
  if (options.window_bytes == 0) return Status::InvalidArgument("restore loader: window_bytes must be > 0");
  if (!std::has_single_bit(options.background_piece_bytes)) {
    return Status::InvalidArgument("restore loader: background_piece_bytes must be a power of two");
  }
  std::unique_ptr<RestoreLoader> loader(new RestoreLoader(nullptr));
  loader->impl_ = std::make_unique<Impl>(options, &loader->all_resident_);
  PHOS_RETURN_IF_ERROR(loader->impl_->Init(options));
  return loader;
}

RestoreLoader::RestoreLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestoreLoader::~RestoreLoader() = default;
int RestoreLoader::Find(CUdeviceptr address) const {
  return impl_->Find(address);
}
Result<CUevent> RestoreLoader::Require(int index) {
  return impl_->Require(index);
}
bool RestoreLoader::IsResident(int index) const {
  return impl_->IsResident(index);
}
Status RestoreLoader::Wait() {
  return impl_->Wait();
}
Status RestoreLoader::status() const {
  return impl_->status();
}
RestoreLoaderStats RestoreLoader::Stats() const {
  return impl_->Stats();
}

}  // namespace phos::runtime
