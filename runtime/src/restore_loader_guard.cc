// The restore loader's validation side: what a loader does with a guard fault in its units
// (dispatched to it by guard_clients.h's handler).
#include <fmt/format.h>

#include <string_view>

#include "phos/driver/cuda_check.h"
#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "restore_loader_impl.h"

namespace phos::runtime {
namespace {

// Copies run on a copy engine that the faulting op may be holding: waiting for the loader's own
// H2D copies could deadlock, so such misses are served from the CPU (phosSimWriteGuarded).
// Kernels, memsets and "compute" ops run on the compute pool.
bool IsCopyEngineOp(std::string_view what) {
  return what == "memcpy" || what == "h2d" || what == "d2h";
}

}  // namespace

Status RestoreLoader::Impl::RegisterForFaults() {
  PHOS_RETURN_IF_ERROR(RegisterGuardClient(*d_, this));
  registered_ = true;
  return Status::Ok();
}

void RestoreLoader::Impl::Unregister() {
  if (!registered_) return;
  UnregisterGuardClient(this);
  registered_ = false;
}

Status RestoreLoader::Impl::WriteUnitLocked(int unit) {
  std::vector<uint8_t> host;
  for (int b : units_[unit].buffers) {
    Buffer& buf = buffers_[b];
    buf.claimed = buf.chunks.size();
    for (size_t k = 0; k < buf.chunks.size(); ++k) {
      if (buf.done[k]) continue;
      const Chunk& c = buf.chunks[k];
      host.resize(c.ref.size);
      PHOS_RETURN_IF_ERROR(ChunkError(b, k, source_->ReadChunk(c.ref, host.data())));
      PHOS_RETURN_IF_ERROR(ChunkError(b, k,
                                      driver::CuStatus(ForEachPiece(buf.address + c.offset, host.data(), c.ref.size,
                                                            granule_, d_->phosSimWriteGuarded),
                                               "phosSimWriteGuarded", d_->error_text())));
      ChunkDoneLocked(b, k);
    }
  }
  return Status::Ok();
}

PhosSimGuardDecision RestoreLoader::Impl::OnFault(CUdeviceptr address, const char* what) {
  driver::ContextScope scope(*d_, ctx_);
  std::lock_guard require(require_mu_);
  std::unique_lock lock(mu_);
  const int unit = UnitOf(address);
  Status s = RetireLocked();
  if (s.ok() && units_[unit].absent == 0) {
    UnguardLocked(units_[unit]);  // its unguard raced the work
    return PHOS_SIM_GUARD_RETRY;
  }
  const int b = Find(address);
  const bool miss = b >= 0 && !buffers_[b].ready && !buffers_[b].required;
  std::vector<int> targets;
  if (miss) {
    ++misses_;
    last_miss_ = what;
    PHOS_LOG(Warn, "restore",
             "{}: speculation miss: {} touched {} before it was loaded; loading everything now", name_, what,
             buffers_[b].name);
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].absent > 0) targets.push_back(static_cast<int>(u));
    }
  } else {
    targets.push_back(unit);  // a Required or loaded buffer, or padding between buffers
  }
  if (IsCopyEngineOp(what)) {
    for (size_t i = 0; i < targets.size() && s.ok(); ++i) s = WriteUnitLocked(targets[i]);
  } else {
    // The faulting work is on the compute pool: the loader's copies on the H2D engine can finish.
    // Synchronised every window's worth so that the chunks held meanwhile stay bounded.
    uint64_t held = 0;
    for (size_t i = 0; i < targets.size() && s.ok(); ++i) {
      for (int b : units_[targets[i]].buffers) held += buffers_[b].size;
      s = RequireUnitLocked(targets[i], lock).status();
      if (s.ok() && (held >= window_ || i + 1 == targets.size())) {
        lock.unlock();
        d_->cuStreamSynchronize(priority_stream_);  // waits on the units' background copies too
        lock.lock();
        s = RetireLocked();
        held = 0;
      }
    }
  }
  if (!s.ok()) {
    FailLocked(s);
    return PHOS_SIM_GUARD_FAIL;
  }
  for (int u : targets) UnguardLocked(units_[u]);
  return PHOS_SIM_GUARD_RETRY;
}

}  // namespace phos::runtime
