// The concurrent restore's loader (docs/design.md D7, D8; issue 6): brings a snapshot's buffers back into
// device memory that is already mapped at their addresses, while the function runs.
//
//   RestoreLoaderOptions opts{.driver = table, .context = ctx, .manifest = &manifest, .source = dram};
//   auto loader = RestoreLoader::Start(opts);            // background streaming begins
//   // before each remoted call (the session's executor):
//   Result<CUevent> ready = (*loader)->Require(index);   // jump the queue; nullptr when resident
//   driver->cuStreamWaitEvent(stream, *ready, 0);        // the launch waits on the GPU, not the CPU
//   if ((*loader)->all_resident()) ...                   // one flag: checks off
//
// Buffers start absent. A background thread streams them in first-touch order (manifest
// first_touch_rank ascending, unranked after, by address; or address order when
// first_touch_order is false), chunk by chunk from the ChunkSource, on its own stream, keeping at
// most window_bytes of copies in flight so that the application's transfers and required buffers
// wait behind a few chunks at most, and issuing nothing while required loads are pending, so that
// a request pays for what it reads and not for what streams beside it. Require() enqueues what is left of one buffer at once on a
// priority stream and returns an event recorded after its last byte, so the caller never blocks
// (chunks already in a DRAM tier are copied from its pinned slots, no read on the calling
// thread; others are read through it first).
//
// Buffers that share a 4 KiB page (small allocations packed into one granule) form a guard unit:
// guards are page-granular, so a unit is guarded, required and unguarded as a whole. Require(i)
// therefore loads every buffer of i's unit, and its event covers them all.
//
// Validation (simgpu, DriverTable::has_guards()): absent units are guarded, their loads use
// phosSimMemcpyHtoDAsyncGuarded, and each unit is unguarded once all its buffers are ready. A
// simgpu without the guarded copy gets the weaker check: a unit is unguarded right before its first
// chunk is enqueued, so device work touching it while it loads is not caught. Device work that
// touches an absent buffer outside what was Required (a speculation miss) faults into the loader's
// handler, which counts it, logs the kernel, makes every buffer resident, and lets the work
// proceed: results stay correct. A fault on a buffer that is Required or loaded (its unguard raced
// the work) is not a miss. One guard handler serves every loader of the process.
//
// A miss by a kernel (or memset, both on the compute pool) waits for the loader's own copies on
// the H2D engine. A miss by a copy ("memcpy", "h2d", "d2h": it may hold the H2D engine itself)
// instead writes every byte not yet loaded with phosSimWriteGuarded from host reads; loader copies
// of those chunks still in flight then land later with the same snapshot bytes, so such a copy
// must not write the buffer it faulted on (the session Requires every range a copy names, so it
// never does).
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/driver/driver_table.h"
#include "phos/store/chunk.h"
#include "phos/store/manifest.h"

namespace phos::store {
class DramTier;
}

namespace phos::runtime {

// Which restores go first on the copy engine (docs/design.md D16): a restore a request waits for
// is urgent; the background streaming of any other (a warm top-up) issues no new copy while an
// urgent one is loading (its Require calls still load at once). One per API server, shared by its
// loaders. Thread-safe.
class LoadPriority {
 public:
  void BeginUrgent();
  void EndUrgent();
  bool Busy() const;
  // Blocks while an urgent restore is loading, until `stop` is true (its setter then calls Wake).
  void WaitForUrgent(const std::atomic<bool>& stop);
  void Wake();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int urgent_ = 0;
};

struct RestoreLoaderOptions {
  driver::DriverTable* driver = nullptr;  // required
  // The context the buffers are mapped in (read-write, at their manifest addresses). Required.
  CUcontext context = nullptr;
  // Must outlive the loader. Buffers are named by their index in manifest->buffers.
  const store::Manifest* manifest = nullptr;
  // Where chunk bytes come from; must outlive the loader. When it is a DramTier (dram below),
  // chunks are copied from its pinned slots under a lease; otherwise read into pinned staging.
  store::ChunkSource* source = nullptr;
  store::DramTier* dram = nullptr;  // `source` itself when it is a DramTier; else null
  // Background order: first-touch (true) or address order (false: the no-order restore mode).
  bool first_touch_order = true;
  // Guard absent buffers when the driver can (simgpu). Default: true.
  bool guard = true;
  // Background copy bytes in flight at most. Default: 8 MiB (two 4 MiB chunks).
  uint64_t window_bytes = 8ull << 20;
  // The background issues each chunk as copies of at most this many bytes (a power of two), so a
  // required load waits behind one piece at most. Default: 1 MiB (40 us at 25 GB/s).
  uint64_t background_piece_bytes = 1ull << 20;
  // Stream the buffers nobody asked for in the background. false: only Require and validation
  // (a guard fault) load anything, which shows on-demand loading on its own, whatever the host's
  // speed. Default: true.
  bool background = true;
  // Where urgent restores are counted (may be null: no priorities), and whether this one is.
  LoadPriority* priority = nullptr;
  bool urgent = false;
  // For logs: "mlp v3 (instance 7)".
  std::string name;
  // Called with a buffer's index once its last byte landed, before its unit is unguarded (on the
  // loader's threads, its lock held: it must not call the loader), with `clean`: no speculation
  // miss so far, so nothing the function ran touched a guarded buffer. Returns true when it set
  // the buffer's access itself (cuMemSetAccess; the unit is then not unguarded). May be empty.
  std::function<bool(int index, bool clean)> on_ready;
};

struct RestoreLoaderStats {
  uint64_t buffers = 0;
  uint64_t bytes = 0;     // buffer bytes on the device so far
  uint64_t required = 0;  // Require() calls that found the buffer not yet loaded
  uint64_t misses = 0;    // guard faults on buffers not Required: speculation misses
  std::string last_miss;  // what touched it (kernel name, "memcpy", ...) for the last miss
  bool all_resident = false;
  std::vector<int> ready_order;  // buffers in the order their last byte landed
  double fully_resident_ms = 0;  // from Start to the last buffer ready; 0 until then
};

class RestoreLoader {
 public:
  // Validates the options (InvalidArgument naming what is missing), guards every buffer (when
  // enabled), creates the streams, and starts streaming. A manifest without buffers is resident at
  // once.
  static Result<std::unique_ptr<RestoreLoader>> Start(const RestoreLoaderOptions& options);
  // Stops streaming, waits for copies in flight, unguards what is still guarded, releases leases,
  // streams and events. Buffers left absent keep whatever bytes they had.
  ~RestoreLoader();
  RestoreLoader(const RestoreLoader&) = delete;
  RestoreLoader& operator=(const RestoreLoader&) = delete;

  // The manifest index of the buffer holding `address`, or -1.
  int Find(CUdeviceptr address) const;
  // Makes buffer `index` (and the buffers sharing its pages) ready as soon as possible: enqueues
  // their remaining chunks on the priority stream now, after the background copies of theirs
  // already enqueued, and returns an event recorded after them (owned by the loader, valid until
  // it is destroyed) for the caller to cuStreamWaitEvent on. nullptr when they are resident
  // already. Thread-safe. The caller blocks only to read chunks its DRAM tier does not hold.
  // Errors: InvalidArgument for a bad index; a chunk that cannot be read (Corruption, I/O) fails
  // the restore: this and every later call return that error.
  Result<CUevent> Require(int index);
  // Whether buffer `index` is loaded (false for a bad index). For tests and logs: the per-call
  // path uses Require.
  bool IsResident(int index) const;
  // Every buffer loaded: the single flag that turns the per-call checks off. Acquire load.
  bool all_resident() const { return all_resident_.load(std::memory_order_acquire); }
  // Blocks until every buffer is resident (or the restore failed).
  Status Wait();
  // The first error of the restore (a chunk that could not be read), or Ok.
  Status status() const;
  RestoreLoaderStats Stats() const;

  class Impl;

 private:
  explicit RestoreLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> all_resident_{false};
  friend class Impl;
};

}  // namespace phos::runtime
