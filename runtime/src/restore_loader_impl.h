// Private to the restore loader (restore_loader.cc: streaming and Require; restore_loader_guard.cc:
// the guard-fault handler and its registry of live loaders).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "guard_clients.h"
#include "phos/runtime/restore_loader.h"
#include "phos/store/dram_tier.h"

namespace phos::runtime {

inline uint64_t AlignDown(uint64_t x, uint64_t a) {
  return x / a * a;
}
inline uint64_t AlignUp(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// Splits [dst, dst + bytes) at granule boundaries: simgpu's guarded writes must stay inside one
// VMM mapping, and mappings are whole granules, so pieces never straddle two.
template <typename Fn>
CUresult ForEachPiece(CUdeviceptr dst, const void* src, size_t bytes, uint64_t granule, Fn&& fn) {
  const auto* from = static_cast<const uint8_t*>(src);
  while (bytes > 0) {
    const size_t piece = std::min<uint64_t>(bytes, AlignDown(dst, granule) + granule - dst);
    if (CUresult r = fn(dst, from, piece); r != CUDA_SUCCESS) return r;
    dst += piece;
    from += piece;
    bytes -= piece;
  }
  return CUDA_SUCCESS;
}

class RestoreLoader::Impl final : public GuardClient {
 public:
  struct Chunk {
    store::ChunkRef ref;
    uint64_t offset = 0;
  };
  struct Buffer {
    CUdeviceptr address = 0;
    uint64_t size = 0;
    std::string name;  // "buffer 3 'bias' at 0x..." for messages
    std::string label;
    int unit = 0;
    std::vector<Chunk> chunks;
    std::vector<bool> done;  // per chunk: its bytes are on the device
    size_t claimed = 0;      // chunks [0, claimed) are enqueued (or being enqueued by a requirer)
    size_t completed = 0;
    int background_in_flight = 0;
    bool required = false;
    bool ready = false;
  };
  // A maximal run of buffers whose page-rounded spans overlap: guarded, required and unguarded
  // together (guards are page-granular and may not overlap).
  struct Unit {
    CUdeviceptr base = 0;
    uint64_t bytes = 0;
    std::vector<int> buffers;
    int absent = 0;
    bool guarded = false;
    CUevent event = nullptr;       // recorded on the priority stream after the unit's last chunk
    CUevent background = nullptr;  // the background stream's position, for the priority stream
    bool event_covers_all = false;
  };
  // A chunk's bytes in pinned host memory: a DRAM tier slot under a lease, or a staging buffer.
  struct ChunkData {
    store::ChunkLease lease;
    void* staging = nullptr;
    const void* data() const { return lease ? lease.data() : staging; }
  };
  struct Copy {
    CUevent done = nullptr;
    int buffer = 0;
    size_t chunk = 0;
    bool background = false;
    ChunkData data;
  };

  Impl(const RestoreLoaderOptions& o, std::atomic<bool>* all_resident)
      : d_(o.driver),
        ctx_(o.context),
        manifest_(o.manifest),
        source_(o.source),
        dram_(o.dram),
        window_(o.window_bytes),
        background_piece_(o.background_piece_bytes),
        background_(o.background),
        priority_(o.priority),
        urgent_(o.urgent),
        all_resident_(all_resident),
        on_ready_(o.on_ready),
        start_(std::chrono::steady_clock::now()) {
    snapshot_ = fmt::format("{} v{}", manifest_->function, manifest_->version);
    name_ = o.name.empty() ? snapshot_ : o.name;
  }
  ~Impl();
  // Stops counting this restore as urgent (resident, failed or ending); mu_ held.
  void EndUrgentLocked();

  Status Init(const RestoreLoaderOptions& o);
  Result<CUevent> Require(int index);
  PhosSimGuardDecision OnFault(CUdeviceptr address, const char* what) override;
  bool Owns(CUdeviceptr address) const override { return UnitOf(address) >= 0; }
  int Find(CUdeviceptr address) const;
  bool IsResident(int index) const;
  Status Wait();
  Status status() const {
    std::lock_guard lock(mu_);
    return failed_;
  }
  RestoreLoaderStats Stats() const;

 private:
  int UnitOf(CUdeviceptr address) const;
  void Run();
  Result<ChunkData> Fetch(const Chunk& chunk);
  void Drop(ChunkData& data);
  Result<CUevent> RequireUnitLocked(int unit, std::unique_lock<std::mutex>& lock);
  Status EnqueueLocked(int buffer, size_t chunk, ChunkData data, bool background);
  Status RetireLocked();
  void FinishLocked(Copy& copy);
  void ChunkDoneLocked(int buffer, size_t chunk);
  Status WriteUnitLocked(int unit);
  void UnguardLocked(Unit& unit);
  void FailLocked(Status why);
  Status ChunkError(int buffer, size_t chunk, const Status& why) const {
    return why.WithContext(fmt::format("restore {}: {} chunk {}", snapshot_, buffers_[buffer].name, chunk));
  }
  Result<CUevent> TakeEventLocked();
  // The process's guard handler dispatches faults in this loader's units to OnFault.
  Status RegisterForFaults();
  void Unregister();

  driver::DriverTable* d_;
  CUcontext ctx_;
  const store::Manifest* manifest_;
  store::ChunkSource* source_;
  store::DramTier* dram_;
  uint64_t window_;
  uint64_t background_piece_;  // RestoreLoaderOptions::background_piece_bytes
  bool background_;  // stream what nobody asked for (RestoreLoaderOptions::background)
  LoadPriority* priority_;
  bool urgent_;
  bool counted_urgent_ = false;        // counted in priority_ until resident, failed or destroyed
  std::atomic<bool> stopping_{false};  // the destructor began (ends a wait in priority_)
  std::atomic<bool>* all_resident_;
  std::function<bool(int, bool)> on_ready_;  // RestoreLoaderOptions::on_ready
  std::chrono::steady_clock::time_point start_;
  std::string snapshot_;
  std::string name_;
  bool guard_ = false;         // units are guarded
  bool guarded_copy_ = false;  // loads write guarded units without unguarding them
  bool registered_ = false;
  uint32_t max_chunk_ = 0;
  uint64_t granule_ = 2ull << 20;  // replaced by the driver's minimum granularity
  CUstream background_stream_ = nullptr;
  CUstream priority_stream_ = nullptr;

  // Fixed after Init.
  std::vector<Buffer> buffers_;
  std::vector<Unit> units_;                              // by address
  std::vector<std::pair<CUdeviceptr, int>> by_address_;  // buffers sorted by address
  std::vector<int> order_;                               // background order

  std::mutex require_mu_;         // one requirer (Require, a miss) claims and enqueues at a time
  mutable std::mutex mu_;         // everything below, and the state of buffers_ and units_
  std::condition_variable work_;  // the background thread: new copies in flight, or stop
  std::condition_variable done_;  // Wait: all resident or failed
  std::list<Copy> in_flight_;
  uint64_t background_bytes_ = 0;
  int requiring_ = 0;           // requirers reading the chunks they claimed
  int required_in_flight_ = 0;  // copies on the priority stream not yet retired
  size_t ready_units_ = 0;
  std::vector<CUevent> free_events_;
  std::vector<CUevent> all_events_;
  Status failed_;
  bool stop_ = false;
  uint64_t loaded_bytes_ = 0;
  std::vector<int> ready_order_;
  uint64_t required_ = 0;
  uint64_t misses_ = 0;
  std::string last_miss_;
  double fully_resident_ms_ = 0;

  std::mutex staging_mu_;
  std::vector<void*> free_staging_;
  std::vector<void*> all_staging_;

  std::thread thread_;
};

}  // namespace phos::runtime
