// Soft captures of a running session (docs/design.md D10).
//
// Copy-on-write: the snapshot holds every
// buffer as it was at the capture's point while the function's calls run on. At the point (on the
// executor, between two calls) every call sent so far has finished; from then on, before a call
// runs whose speculated write set names a buffer not copied yet (or that frees one), the rest of
// that buffer's copy is enqueued on a stream of the highest priority and the call's stream waits
// for it, so the CPU does not wait. The capturing thread copies the buffers as the snapshot writer
// takes them, in pieces of 4 MiB on a stream of the lowest priority and one piece ahead, so that a
// copy before a write never queues behind more than a piece of the capture's own. Each piece lands
// in pinned host memory of its own, which goes back to a small pool once the writer has taken it:
// the capture holds a few pieces, and what copies before writes took ahead of the writer.
//
// Validation (simgpu): the buffers are guarded against writes from the point on. A write that
// speculation expected faults once its copy has landed (the call waited for it) and unguards the
// buffer's pages; a write it missed (a kernel writing through a pointer table) faults before its
// buffer was copied, and the guard handler copies the buffer from the host's view of the device
// memory first, counts the miss and lets the write go on. Reads never fault.
//
// Recopy: the snapshot holds every buffer as it is at the final stop. From the capture's start on,
// the buffers a call may write (or free) are marked dirty before it runs, and the capturing thread
// copies every buffer as copy-on-write does, without copying any before a call. At the final stop
// (on the executor, the calls held back by the caller) the session is described again: a buffer
// that is clean keeps its copy; a dirty one, or one allocated since, is read from the device then.
// Validation guards the buffers until the final stop: a write speculation missed faults, marks its
// buffers dirty (counted) and unguards them.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/driver/cuda_check.h"
#include "session.h"

namespace phos::runtime {
namespace {

using ipc::Op;

constexpr uint64_t kPieceBytes = uint64_t{4} << 20;
// Pinned pieces kept for reuse; more are freed as the writer is done with them.
constexpr size_t kSparePieces = 4;
// A unit's guard is set and lifted in ranges of at most this many bytes: each mprotect holds the
// process's address space for its whole range, which the instance's own work may wait for.
constexpr uint64_t kGuardPieceBytes = uint64_t{16} << 20;

// Guards [start, start + bytes) against writes, piece by piece; false (nothing left guarded) when
// a piece is refused.
bool GuardRange(driver::DriverTable& driver, uint64_t start, uint64_t bytes) {
  for (uint64_t at = 0; at < bytes; at += kGuardPieceBytes) {
    if (driver.phosSimGuardRangeWrites(start + at, std::min(kGuardPieceBytes, bytes - at)) != CUDA_SUCCESS) {
      for (uint64_t back = 0; back < at; back += kGuardPieceBytes) {
        driver.phosSimUnguardRange(start + back, std::min(kGuardPieceBytes, bytes - back));
      }
      return false;
    }
  }
  return true;
}

// Lifts what GuardRange set, `pause` between two pieces. A piece simgpu lifted already (on a
// fault's retry) is refused, harmlessly.
void UnguardRange(driver::DriverTable& driver, uint64_t start, uint64_t bytes,
                  std::chrono::microseconds pause = std::chrono::microseconds(0)) {
  for (uint64_t at = 0; at < bytes; at += kGuardPieceBytes) {
    if (at > 0 && pause.count() > 0) std::this_thread::sleep_for(pause);
    driver.phosSimUnguardRange(start + at, std::min(kGuardPieceBytes, bytes - at));
  }
}

}  // namespace

int Session::FindSoftCopy(const std::vector<SoftCopy>& buffers, uint64_t base) {
  auto it = std::lower_bound(buffers.begin(), buffers.end(), base,
                             [](const SoftCopy& b, uint64_t at) { return b.base < at; });
  return it != buffers.end() && it->base == base ? static_cast<int>(it - buffers.begin()) : -1;
}

Result<Session::SoftBegun> Session::BeginSoftCapture(const std::string& function, const std::string& device_profile,
                                                     bool recopy) {
  if (soft_ != nullptr) {
    std::unique_lock lock(soft_->mu);
    if (!soft_->finished) return Status::FailedPrecondition("a soft checkpoint of this session is still copying");
    lock.unlock();
    ReleaseSoftCapture();  // an earlier one, finished
  }
  PHOS_ASSIGN_OR_RETURN(CaptureRequest request, DescribeForCapture(function, device_profile));
  auto capture = std::make_shared<SoftCapture>();
  capture->driver = driver_;
  capture->pid = pid_;
  capture->recopy = recopy;
  soft_ = capture;
  auto fail = [&](Status why) {
    capture->finished = true;
    ReleaseSoftCapture();
    return why.WithContext(recopy ? "soft recopy capture" : "soft copy-on-write capture");
  };
  const int devices = group_ ? group_->size() : 1;
  for (int d = 0; d < devices; ++d) {
    CUcontext ctx = group_ ? group_->context(d) : context_;
    driver::ContextScope scope(*driver_, ctx);
    // The point: every call sent so far has finished.
    CUresult r = driver_->cuCtxSynchronize();
    int least = 0;
    int greatest = 0;
    if (r == CUDA_SUCCESS) r = driver_->cuCtxGetStreamPriorityRange(&least, &greatest);
    CUstream stream = nullptr;
    CUstream cow = nullptr;
    CUevent background = nullptr;
    // The least priority: the function's own work goes first. A copy before a write holds the
    // call back: the greatest.
    if (r == CUDA_SUCCESS) r = driver_->cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, least);
    if (r == CUDA_SUCCESS) capture->streams.push_back(stream);
    if (r == CUDA_SUCCESS) r = driver_->cuStreamCreateWithPriority(&cow, CU_STREAM_NON_BLOCKING, greatest);
    if (r == CUDA_SUCCESS) capture->cow_streams.push_back(cow);
    if (r == CUDA_SUCCESS) r = driver_->cuEventCreate(&background, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) capture->background.push_back(background);
    capture->contexts.push_back(ctx);
    if (r != CUDA_SUCCESS) return fail(driver::CuStatus(r, fmt::format("device {}: take the point", d), driver_->error_text()));
  }
  // Module globals are small: read at the point (a recopy's, at its final stop).
  for (CaptureModule& m : request.modules) {
    if (recopy) break;
    for (CaptureGlobal& g : m.globals) {
      g.contents.resize(g.size);
      CUresult r = driver_->cuMemcpyDtoH(g.contents.data(), g.address, g.size);
      if (r != CUDA_SUCCESS) {
        return fail(driver::CuStatus(r, fmt::format("read module global '{}'", g.name), driver_->error_text()));
      }
    }
  }
  for (const CaptureBuffer& b : request.buffers) {
    if (b.device < 0 || b.device >= devices) {
      return fail(Status::FailedPrecondition(fmt::format("buffer {:#x} is on device {}, outside the session's {}",
                                                         b.address, b.device, devices)));
    }
    capture->buffers.push_back({.base = b.address,
                                .size = b.size,
                                .device = b.device,
                                .pieces = std::vector<void*>((b.size + kPieceBytes - 1) / kPieceBytes, nullptr)});
  }
  if (!std::is_sorted(capture->buffers.begin(), capture->buffers.end(),
                      [](const SoftCopy& a, const SoftCopy& b) { return a.base < b.base; })) {
    return fail(Status::Internal("the capture's buffers are not in address order"));
  }
  GuardSoftCapture(*driver_, *capture);
  request.read = [this, capture](size_t index, uint64_t offset, void* dst, size_t bytes) {
    return ReadSoftCopy(*capture, index, offset, dst, bytes);
  };
  // The function's restores need the images captured: its context keeps them loaded.
  modules_owner_ = function;
  return SoftBegun{std::move(request), std::move(capture)};
}

Status Session::EnqueueSoftCopy(driver::DriverTable& driver, SoftCapture& capture, SoftCopy& b, CUstream stream,
                                size_t until, CUevent* done) {
  driver::ContextScope scope(driver, capture.contexts[b.device]);
  const driver::CuErrorText& text = driver.error_text();
  for (; b.enqueued < until; ++b.enqueued) {
    void* host = nullptr;
    if (!capture.spare_pieces.empty()) {
      host = capture.spare_pieces.back();
      capture.spare_pieces.pop_back();
    } else {
      PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemHostAlloc(&host, kPieceBytes, 0));
    }
    b.pieces[b.enqueued] = host;
    const uint64_t offset = b.enqueued * kPieceBytes;
    const size_t piece = static_cast<size_t>(std::min(kPieceBytes, b.size - offset));
    PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemcpyDtoHAsync(host, b.base + offset, piece, stream));
  }
  if (*done == nullptr) PHOS_CU_RETURN_IF_ERROR(text, driver.cuEventCreate(done, CU_EVENT_DISABLE_TIMING));
  PHOS_CU_RETURN_IF_ERROR(text, driver.cuEventRecord(*done, stream));
  return Status::Ok();
}

void Session::GuardSoftCapture(driver::DriverTable& driver, SoftCapture& capture) {
  if (driver.phosSimGuardRangeWrites == nullptr) return;  // NVIDIA's driver: no validation
  constexpr uint64_t kPage = 4096;
  for (size_t i = 0; i < capture.buffers.size(); ++i) {
    const SoftCopy& b = capture.buffers[i];
    const uint64_t start = b.base / kPage * kPage;
    const uint64_t end = (b.base + b.size + kPage - 1) / kPage * kPage;
    if (!capture.units.empty() && start < capture.units.back().start + capture.units.back().bytes) {
      SoftCapture::Unit& u = capture.units.back();  // shares a page with the previous buffer
      u.bytes = std::max(u.start + u.bytes, end) - u.start;
      u.buffers.push_back(static_cast<int>(i));
    } else {
      capture.units.push_back({.start = start, .bytes = end - start, .buffers = {static_cast<int>(i)}});
    }
    capture.buffers[i].unit = static_cast<int>(capture.units.size()) - 1;
  }
  if (Status s = RegisterGuardClient(driver, &capture); !s.ok()) {
    PHOS_LOG(Warn, "capture", "pid {}: soft capture without validation: {}", capture.pid, s.message());
    capture.units.clear();
    return;
  }
  capture.registered = true;
  std::lock_guard lock(capture.mu);
  for (SoftCapture::Unit& u : capture.units) {
    // Refused for memory that is not read-write (read-only shared weights: no call writes them).
    u.guarded = GuardRange(driver, u.start, u.bytes);
  }
}

bool Session::SoftCapture::Owns(CUdeviceptr address) const {
  std::lock_guard lock(mu);
  for (const Unit& u : units) {
    if (address >= u.start && address - u.start < u.bytes) return true;
  }
  return false;
}

PhosSimGuardDecision Session::SoftCapture::OnFault(CUdeviceptr address, const char* what) {
  std::lock_guard lock(mu);
  Unit* unit = nullptr;
  for (Unit& u : units) {
    if (address >= u.start && address - u.start < u.bytes) unit = &u;
  }
  if (unit == nullptr || !unit->guarded) return PHOS_SIM_GUARD_RETRY;  // unguarded meanwhile
  if (lift_on_fault) {
    // Committed, and the session ends: nothing of it is copied any more.
    UnguardRange(*driver, unit->start, unit->bytes);
    unit->guarded = false;
    return PHOS_SIM_GUARD_RETRY;
  }
  if (recopy) {
    // Copied again at the final stop: nothing to copy now.
    if (!stopped) {
      ++stats.missed_writes;
      PHOS_LOG(Warn, "capture",
               "pid {}: speculation miss during a soft recopy checkpoint: {} wrote {:#x}, not marked written; its "
               "buffers are copied again at the final stop",
               pid, what, address);
      MarkDirty(*driver, *this, unit->buffers.front());
    }
    return PHOS_SIM_GUARD_RETRY;
  }
  for (int index : unit->buffers) {
    SoftCopy& b = buffers[index];
    if (finished || !failed.ok() || b.taken || b.on_host) continue;
    if (b.copied != nullptr) {
      // A write the call's speculation named: its stream waited for this copy. A copy still in
      // flight (a neighbour's, sharing a page) runs on the device-to-host engine, which no write
      // holds.
      driver::ContextScope scope(*driver, contexts[b.device]);
      if (driver->cuEventSynchronize(b.copied) != CUDA_SUCCESS) return PHOS_SIM_GUARD_FAIL;
      continue;
    }
    // A write speculation missed: the buffer's bytes as of the point are still there, readable by
    // the host (write-guarded simgpu memory), and copied before the write goes on, once the pieces
    // the capture enqueued into the same host memory have landed.
    driver::ContextScope scope(*driver, contexts[b.device]);
    if (b.enqueued > 0 && driver->cuEventSynchronize(background[b.device]) != CUDA_SUCCESS) return PHOS_SIM_GUARD_FAIL;
    for (; b.enqueued < b.pieces.size(); ++b.enqueued) {
      void* host = nullptr;
      if (driver->cuMemHostAlloc(&host, kPieceBytes, 0) != CUDA_SUCCESS) return PHOS_SIM_GUARD_FAIL;
      b.pieces[b.enqueued] = host;
      const uint64_t offset = b.enqueued * kPieceBytes;
      std::memcpy(host, reinterpret_cast<const void*>(b.base + offset), std::min(kPieceBytes, b.size - offset));
    }
    b.on_host = true;
    ++stats.missed_writes;
    PHOS_LOG(Warn, "capture",
             "pid {}: speculation miss during a soft copy-on-write checkpoint: {} wrote buffer {:#x} before it was "
             "copied; copied first",
             pid, what, b.base);
  }
  UnguardRange(*driver, unit->start, unit->bytes);
  unit->guarded = false;
  return PHOS_SIM_GUARD_RETRY;
}

Status Session::ReadSoftCopy(SoftCapture& capture, size_t index, uint64_t offset, void* dst, size_t bytes) {
  // The writer asks for a chunk at a time, in order; a chunk may span pieces.
  while (bytes > 0) {
    CUevent wait = nullptr;
    CUevent landed = nullptr;  // this read's own: after the piece it asks for
    const char* host = nullptr;
    CUcontext ctx = nullptr;
    const size_t k = static_cast<size_t>(offset / kPieceBytes);
    const uint64_t in_piece = offset - k * kPieceBytes;
    size_t n = 0;
    {
      std::lock_guard lock(capture.mu);
      if (!capture.failed.ok()) return capture.failed;
      if (index >= capture.buffers.size()) return Status::Internal(fmt::format("no buffer {} in the capture", index));
      SoftCopy& b = capture.buffers[index];
      if (b.taken || offset > b.size || bytes > b.size - offset || (k < b.enqueued && b.pieces[k] == nullptr)) {
        return Status::Internal(fmt::format("buffer {:#x}: bytes [{}, +{}) asked again or past its {}", b.base,
                                            offset, bytes, b.size));
      }
      n = static_cast<size_t>(std::min<uint64_t>(bytes, std::min(kPieceBytes, b.size - k * kPieceBytes) - in_piece));
      ctx = capture.contexts[b.device];
      if (b.freed && k >= b.enqueued) {
        // Freed during a soft recopy: dirty, its copy never used. Nothing more is read from it.
        std::memset(dst, 0, n);
        if (offset + n == b.size) b.taken = true;
        dst = static_cast<char*>(dst) + n;
        offset += n;
        bytes -= n;
        continue;
      }
      if (b.on_host && k >= b.enqueued) return Status::Internal("a piece the guard handler copied is missing");
      if (k < b.enqueued) {
        // Enqueued already: by a copy before a write (b.copied covers it and the pieces before), or
        // ahead by this thread, or copied by the guard handler.
        wait = b.copied != nullptr ? b.copied : b.on_host ? nullptr : capture.background[b.device];
      } else {
        CUstream stream = capture.streams[b.device];
        PHOS_RETURN_IF_ERROR(EnqueueSoftCopy(*driver_, capture, b, stream, k + 1, &landed));
        // One piece ahead (a copy before a write queues behind at most that much of the capture's),
        // and `background` recorded after every piece enqueued here, the last one too: a copy before
        // a write and the guard handler wait on it for the pieces under way.
        Status ahead = EnqueueSoftCopy(*driver_, capture, b, stream, std::min(b.enqueued + 1, b.pieces.size()),
                                       &capture.background[b.device]);
        if (!ahead.ok()) {
          driver::ContextScope scope(*driver_, ctx);
          driver_->cuEventDestroy(landed);
          return ahead;
        }
        wait = landed;
      }
      host = static_cast<const char*>(b.pieces[k]);
    }
    if (wait != nullptr) {
      driver::ContextScope scope(*driver_, ctx);
      CUresult r = driver_->cuEventSynchronize(wait);
      if (landed != nullptr) driver_->cuEventDestroy(landed);
      PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), r);
    }
    std::memcpy(dst, host + in_piece, n);
    std::lock_guard lock(capture.mu);
    SoftCopy& b = capture.buffers[index];
    if (in_piece + n == std::min(kPieceBytes, b.size - k * kPieceBytes)) {
      // The writer has the whole piece: its memory goes back to the pool, or to the driver.
      if (capture.spare_pieces.size() < kSparePieces) {
        capture.spare_pieces.push_back(b.pieces[k]);
      } else {
        driver::ContextScope scope(*driver_, ctx);
        driver_->cuMemFreeHost(b.pieces[k]);
      }
      b.pieces[k] = nullptr;
    }
    if (offset + n == b.size) {
      b.taken = true;
      // Its unit is unguarded once the writer has all of it, here, not at the capture's end on the
      // executor: a write no longer has anything to wait for. A recopy watches for writes until its
      // final stop.
      if (b.unit >= 0 && capture.units[b.unit].guarded && !capture.recopy) {
        SoftCapture::Unit& u = capture.units[b.unit];
        const bool all = std::all_of(u.buffers.begin(), u.buffers.end(),
                                     [&](int i) { return capture.buffers[i].taken; });
        if (all) {
          UnguardRange(*driver_, u.start, u.bytes);
          u.guarded = false;
        }
      }
    }
    dst = static_cast<char*>(dst) + n;
    offset += n;
    bytes -= n;
  }
  return Status::Ok();
}

CUresult Session::CopyBeforeWrite(const ipc::RecordView& record) {
  std::shared_ptr<SoftCapture> capture = soft_;
  {
    std::lock_guard lock(capture->mu);
    if (capture->finished) {
      capture.reset();
    }
  }
  if (capture == nullptr) {
    ReleaseSoftCapture();  // finished: nothing is copied for this call or any later one
    return CUDA_SUCCESS;
  }
  // The buffers the call may write, and how it waits for their copies: its stream, or (a free,
  // which zeroes the memory at once; a call that cannot be analysed) this thread.
  std::vector<int> targets;
  bool all = false;
  bool on_host = false;
  CUstream stream = nullptr;
  const Op op = static_cast<Op>(record.header.opcode);
  if (op == Op::kMemFree || op == Op::kMemFreeAsync) {
    uint64_t ptr = 0;
    if (ipc::PointerArgs a; op == Op::kMemFree && DecodeRecord(record, &a)) ptr = a.ptr;
    if (ipc::StreamPointerArgs a; op == Op::kMemFreeAsync && DecodeRecord(record, &a)) ptr = a.ptr;
    std::lock_guard lock(capture->mu);
    if (int index = FindSoftCopy(capture->buffers, ptr); ptr != 0 && index >= 0) targets.push_back(index);
    on_host = true;
  } else {
    AccessSets sets;
    const Speculation speculation = Speculate(record, &sets, &stream);
    if (speculation == Speculation::kNone) return CUDA_SUCCESS;
    if (speculation == Speculation::kUnknown || !sets.complete()) {
      // It may write anything.
      all = true;
      on_host = speculation == Speculation::kUnknown;
    } else {
      std::lock_guard lock(capture->mu);
      for (const BufferRef& b : sets.write.buffers()) {
        if (int index = FindSoftCopy(capture->buffers, b.base); index >= 0) targets.push_back(index);
      }
    }
  }
  std::vector<CUevent> waits;
  {
    std::lock_guard lock(capture->mu);
    if (!capture->failed.ok()) return CUDA_SUCCESS;  // nothing more is copied for a failed checkpoint
    if (all) {
      for (size_t i = 0; i < capture->buffers.size(); ++i) targets.push_back(static_cast<int>(i));
    }
    if (capture->recopy) {
      const bool frees = op == Op::kMemFree || op == Op::kMemFreeAsync;
      for (int index : targets) {
        SoftCopy& b = capture->buffers[index];
        if (frees && !b.freed) {
          // The free zeroes the memory at once: the capture's pieces of it under way land first,
          // and no more are read.
          if (b.enqueued > 0) {
            driver::ContextScope scope(*driver_, capture->contexts[b.device]);
            if (CUresult r = driver_->cuEventSynchronize(capture->background[b.device]); r != CUDA_SUCCESS) return r;
          }
          b.freed = true;
        }
        if (!b.dirty) MarkDirty(*driver_, *capture, index);
      }
      return CUDA_SUCCESS;
    }
    for (int index : targets) {
      SoftCopy& b = capture->buffers[index];
      if (b.taken || b.on_host) continue;
      if (b.copied == nullptr) {
        // The rest of the buffer, after the pieces the capture enqueued already.
        CUstream cow = capture->cow_streams[b.device];
        Status s = Status::Ok();
        if (b.enqueued > 0) {
          driver::ContextScope scope(*driver_, capture->contexts[b.device]);
          s = driver::CuStatus(driver_->cuStreamWaitEvent(cow, capture->background[b.device], 0),
                               "wait for the capture's pieces", driver_->error_text());
        }
        if (s.ok()) s = EnqueueSoftCopy(*driver_, *capture, b, cow, b.pieces.size(), &b.copied);
        if (!s.ok()) {
          // The checkpoint fails (its writer is told), not the function's call, which runs on.
          PHOS_LOG_EVERY_SEC(Error, "capture", 1, "pid {}: copy of buffer {:#x} before a call writes it: {}", pid_,
                             b.base, s.message());
          capture->failed = s.WithContext(fmt::format("copy buffer {:#x} before a call wrote it", b.base));
          return CUDA_SUCCESS;
        }
        ++capture->stats.copied_before_write;
      }
      waits.push_back(b.copied);
    }
  }
  // The events live until the capture is released, which only this thread does.
  for (CUevent copied : waits) {
    CUresult r = on_host ? driver_->cuEventSynchronize(copied) : driver_->cuStreamWaitEvent(stream, copied, 0);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

void Session::MarkDirty(driver::DriverTable& driver, SoftCapture& capture, int index) {
  SoftCopy& b = capture.buffers[index];
  b.dirty = true;
  if (b.unit < 0) return;
  // The guard's unit is its pages: the buffers sharing them are unguarded with it, and so no
  // longer watched; they are copied again too.
  SoftCapture::Unit& u = capture.units[b.unit];
  for (int other : u.buffers) capture.buffers[other].dirty = true;
  if (u.guarded) UnguardRange(driver, u.start, u.bytes);
  u.guarded = false;
}

Result<std::unique_ptr<store::SnapshotWriter>> Session::FinishSoftRecopy(store::Store& store,
                                                                         const std::string& function,
                                                                         const std::string& device_profile,
                                                                         Precopy& ahead) {
  std::shared_ptr<SoftCapture> capture = soft_;
  if (capture == nullptr || !capture->recopy) return Status::Internal("no soft recopy of this session is under way");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto ms = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  };
  // Every call sent so far finished: a write speculation missed has faulted by now.
  for (CUcontext ctx : capture->contexts) {
    driver::ContextScope scope(*driver_, ctx);
    PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuCtxSynchronize());
  }
  PHOS_ASSIGN_OR_RETURN(CaptureRequest request, DescribeForCapture(function, device_profile));
  {
    std::lock_guard lock(capture->mu);
    capture->stopped = true;
    if (ahead.buffers.size() != capture->buffers.size()) {
      return Status::Internal(fmt::format("the first pass copied {} buffers of the {} it began with",
                                          ahead.buffers.size(), capture->buffers.size()));
    }
    for (CaptureBuffer& b : request.buffers) {
      const int index = FindSoftCopy(capture->buffers, b.address);
      const bool clean = index >= 0 && !capture->buffers[index].dirty && capture->buffers[index].taken &&
                         capture->buffers[index].size == b.size && capture->buffers[index].device == b.device;
      if (clean) {
        b.precopied = index;
      } else {
        ++capture->stats.recopied;
        capture->stats.recopied_bytes += b.size;
      }
    }
  }
  const Clock::time_point described = Clock::now();
  Result<std::unique_ptr<store::SnapshotWriter>> written = WriteCapture(request, store, &ahead);
  PHOS_LOG(Debug, "capture", "pid {}: final stop of a soft recopy: described in {:.1f} ms, written in {:.1f} ms", pid_,
           ms(start, described), ms(described, Clock::now()));
  // The function's restores need the images captured: its context keeps them loaded.
  if (written.ok()) modules_owner_ = function;
  return written;
}

void Session::UnguardSoftCapture(driver::DriverTable& driver, SoftCapture& capture, bool pace,
                                 const std::function<bool(const SoftCapture::Unit&)>& keep) {
  // Marked under the lock, lifted outside it: lifting a large unit takes long (simgpu), and the
  // executor takes the lock before every call. A write faulting on a unit in between retries until
  // its guard is gone.
  std::vector<std::pair<uint64_t, uint64_t>> lift;
  {
    std::lock_guard lock(capture.mu);
    for (SoftCapture::Unit& u : capture.units) {
      if (!u.guarded || (keep && keep(u))) continue;
      lift.emplace_back(u.start, u.bytes);
      u.guarded = false;
    }
  }
  // Paced: each piece's lift holds the process's address space (mprotect), which the instance's
  // own work waits for when it faults memory in; between two, it catches up.
  const std::chrono::microseconds pause(pace ? 500 : 0);
  for (const auto& [start, bytes] : lift) UnguardRange(driver, start, bytes, pause);
}

std::shared_ptr<Session::SoftCapture> Session::ReleaseSoftCapture(bool unmapping) {
  if (soft_ == nullptr) return nullptr;
  std::shared_ptr<SoftCapture> capture = std::move(soft_);
  std::function<bool(const SoftCapture::Unit&)> left_to_unmap;
  if (unmapping && range_release_ == RangeRelease::kUnmappedZeroedBehind) {
    // The ranges ScrubBorrowedSpaces unmaps without writing them (UnmapAll): its own and, in a
    // device group, every device's.
    left_to_unmap = [this](const SoftCapture::Unit& u) {
      InstanceAddressSpace* space = SpaceOf(u.start);
      return space != nullptr && space->borrowed() && space->Contains(u.start + u.bytes - 1) &&
             (group_.has_value() || (space == space_.get() && lease_));
    };
  }
  {
    std::lock_guard lock(capture->mu);
    capture->finished = true;
    if (left_to_unmap) capture->lift_on_fault = true;
  }
  // Unguarded before the guard client goes: a write faulting meanwhile still finds it.
  UnguardSoftCapture(*driver_, *capture, /*pace=*/false, left_to_unmap);
  std::shared_ptr<SoftCapture> unregister_later;
  if (capture->registered) {
    if (left_to_unmap) {
      unregister_later = capture;
    } else {
      UnregisterGuardClient(capture.get());
    }
  }
  std::lock_guard lock(capture->mu);
  for (size_t d = 0; d < capture->contexts.size(); ++d) {
    driver::ContextScope scope(*driver_, capture->contexts[d]);
    // Copies still in flight (a capture that failed part way) land before their memory goes.
    if (d < capture->streams.size()) driver_->cuStreamSynchronize(capture->streams[d]);
    if (d < capture->cow_streams.size()) driver_->cuStreamSynchronize(capture->cow_streams[d]);
  }
  for (SoftCopy& b : capture->buffers) {
    driver::ContextScope scope(*driver_, capture->contexts[b.device]);
    if (b.copied != nullptr) driver_->cuEventDestroy(b.copied);
    b.copied = nullptr;
    for (void*& piece : b.pieces) {
      if (piece != nullptr) driver_->cuMemFreeHost(piece);
      piece = nullptr;
    }
  }
  if (!capture->contexts.empty()) {
    driver::ContextScope scope(*driver_, capture->contexts[0]);
    for (void* piece : capture->spare_pieces) driver_->cuMemFreeHost(piece);
  }
  capture->spare_pieces.clear();
  for (size_t d = 0; d < capture->contexts.size(); ++d) {
    driver::ContextScope scope(*driver_, capture->contexts[d]);
    if (d < capture->streams.size()) driver_->cuStreamDestroy(capture->streams[d]);
    if (d < capture->cow_streams.size()) driver_->cuStreamDestroy(capture->cow_streams[d]);
    if (d < capture->background.size()) driver_->cuEventDestroy(capture->background[d]);
  }
  capture->streams.clear();
  capture->cow_streams.clear();
  capture->background.clear();
  return unregister_later;
}

}  // namespace phos::runtime
