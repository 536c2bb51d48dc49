// The stop-the-world restore (docs/design.md D7's baseline, the cuda-checkpoint shape): into a fresh
// context, map every buffer of a snapshot at its original device address, copy all of its
// bytes, load its modules, and only then let the function run.
//
//   VmmDeviceMapper mapper(table, /*device=*/0);
//   RestoreRequest req{.driver = table, .context = fresh, .mapper = &mapper, .pool = pool.get()};
//   Result<RestoreReport> report = RestoreStopTheWorld(req, manifest, *store);  // or a DramTier
//
// Addresses come back exactly (a device pointer the function keeps in its CPU state stays valid),
// so the device memory is mapped through a DeviceMapper: the default VmmDeviceMapper reserves the
// addresses with the raw VMM calls; the API server's per-instance VA allocator can stand in for
// it by implementing the same two methods. On any failure everything this restore mapped and
// loaded is undone before it returns.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/driver/driver_table.h"
#include "phos/store/chunk.h"
#include "phos/store/manifest.h"
#include "phos/store/reader.h"

namespace phos::runtime {

// Makes device memory exist at exact addresses of the current process's device address space.
class DeviceMapper {
 public:
  virtual ~DeviceMapper() = default;
  // [address, address + size) becomes readable and writable device memory. AlreadyExists naming
  // the range when part of it is taken by someone else.
  virtual Status MapAt(CUdeviceptr address, uint64_t size) = 0;
  // Undoes every MapAt of this mapper (a failed restore).
  virtual void UnmapAll() = 0;
};

// One physical allocation mapped by VmmDeviceMapper: what a release (or ctxpool's scrub) undoes.
struct VmmMapping {
  CUdeviceptr base = 0;
  uint64_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
};

// The default mapper: for each MapAt, the granule-rounded span around the range is reserved at
// exactly its address (cuMemAddressReserve with that address; simgpu and NVIDIA's driver honour
// a free one), backed by cuMemCreate on `device`, cuMemMap'ed and opened read-write. Granules it
// already mapped for an earlier range (two small buffers sharing a granule) are reused, so
// buffers that cudaMalloc packed into one granule restore too. Not thread-safe.
class VmmDeviceMapper final : public DeviceMapper {
 public:
  VmmDeviceMapper(driver::DriverTable* driver, int device) : driver_(driver), device_(device) {}
  // Keeps what is mapped: a successful restore's memory belongs to the instance afterwards.
  ~VmmDeviceMapper() override = default;
  VmmDeviceMapper(const VmmDeviceMapper&) = delete;
  VmmDeviceMapper& operator=(const VmmDeviceMapper&) = delete;

  Status MapAt(CUdeviceptr address, uint64_t size) override;
  void UnmapAll() override;

  // By base address. Hand these to whoever frees the instance's memory.
  std::vector<VmmMapping> mappings() const;
  uint64_t granularity() const { return granularity_; }

 private:
  Status EnsureGranularity();
  // Maps [base, base + bytes) (granule-aligned, none of it mapped by this mapper).
  Status MapSpan(CUdeviceptr base, uint64_t bytes);

  driver::DriverTable* driver_;
  int device_;
  uint64_t granularity_ = 0;
  std::map<CUdeviceptr, VmmMapping> mapped_;  // by base; spans never overlap
};

struct RestoreRequest {
  driver::DriverTable* driver = nullptr;
  // The fresh context the function will run in; pushed current for the restore.
  CUcontext context = nullptr;
  // Maps each buffer at its address. Required; VmmDeviceMapper is the default implementation.
  DeviceMapper* mapper = nullptr;
  // I/O threads of the chunk reader. Required.
  store::ReaderPool* pool = nullptr;
  // Pinned staging of the reader (a DriverPinnedAllocator, so host-to-device copies run at the
  // pinned rate). Default (null): the reader's anonymous mmap.
  store::PinnedAllocator* staging_allocator = nullptr;
  // Staging bytes of the reader (see store::ReaderOptions). Default: 16 MiB.
  uint64_t staging_bytes = 16ull << 20;
};

struct RestoreReport {
  double map_ms = 0;      // mapping every buffer
  double copy_ms = 0;     // reading and copying every chunk to the device
  double modules_ms = 0;  // reading and loading the module images
  uint64_t buffers = 0;
  uint64_t bytes = 0;         // buffer bytes copied
  uint64_t module_bytes = 0;  // module image bytes loaded
  // Loaded in manifest order; the caller owns them (cuModuleUnload).
  std::vector<CUmodule> modules;
};

// Reads module `index` of `manifest` from `source` (every chunk verified, then the whole image
// against its content hash) and loads it into the current context, its globals holding their
// captured bytes (WriteModuleGlobals); adds the image's size to *bytes. Errors name the module
// and chunk.
Result<CUmodule> LoadSnapshotModule(driver::DriverTable* d, const store::Manifest& manifest, int index,
                                    store::ChunkSource& source, uint64_t* bytes);

// Writes the captured bytes of `module`'s globals into `loaded`, a module of the same image in
// the current context, wherever its globals lie there (a module kept loaded from an earlier
// instance holds that instance's values until then). Corruption when the module has no such
// global or one of another size (the image is the same, so the manifest is wrong).
Status WriteModuleGlobals(driver::DriverTable* d, const store::Module& module, CUmodule loaded);

// Restores `manifest`'s buffers and modules into `request.context`, reading chunks from `source`
// (the Store, or a DramTier in front of it). Stream, event and library-handle settings in the
// manifest are not recreated here: the API server owns the virtual handles. Errors name the
// snapshot, buffer and chunk (Corruption for a chunk that does not verify); nothing stays mapped
// or loaded after a failure.
Result<RestoreReport> RestoreStopTheWorld(const RestoreRequest& request, const store::Manifest& manifest,
                                          store::ChunkSource& source);

}  // namespace phos::runtime
