// GPU-state capture into the snapshot store (docs/design.md D5, D6; issue 6): a quiesced context's
// buffers, module images and virtual handle settings become one committed snapshot version.
//
//   CaptureRequest req{.driver = table, .context = ctx, .function = "mlp", .device_profile = "a100-pcie4"};
//   req.buffers.push_back({.address = weights, .size = bytes, .label = "weights", .first_touch_rank = 0});
//   req.modules.push_back({.image = image_bytes, .kind = "simgpu"});
//   Result<uint64_t> version = CaptureGpuState(req, *store);
//
// Buffer bytes never sit whole in host memory: each buffer is streamed into the store's writer
// one chunk at a time through a single pinned staging buffer of one chunk (cuMemHostAlloc), so
// capturing a 40 GB model needs one chunk of host memory, and each device-to-host copy runs at
// the pinned rate.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/driver/driver_table.h"
#include "phos/store/store.h"

namespace phos::runtime {

struct CaptureBuffer {
  CUdeviceptr address = 0;  // device address the function holds; restored exactly here
  uint64_t size = 0;        // > 0
  uint64_t alignment = 256;
  std::string label;              // for humans (phos-snapshot inspect)
  int32_t first_touch_rank = -1;  // order of first use after entry; -1: not recorded
  store::AccessClass access_class = store::AccessClass::kUnknown;
  int32_t device = 0;  // the function's device whose memory it is
  // A soft recopy's final stop: the index in Precopy::buffers of the copy made ahead that still
  // holds its bytes (no call wrote it since); -1: read now.
  int32_t precopied = -1;
};

// A module global the function named (cudaMemcpyToSymbol, cudaGetSymbolAddress): its bytes are
// read at capture and written back wherever the global lies after a restore loads the module.
struct CaptureGlobal {
  std::string name;
  CUdeviceptr address = 0;
  uint64_t size = 0;  // > 0
  // Its bytes, read already (a capture of a session that runs on reads them at its point); empty:
  // read from the device at capture.
  std::string contents;
};

struct CaptureModule {
  std::string image;  // the bytes cuModuleLoadData was given
  std::string kind;   // "simgpu" or "fatbin"
  std::vector<CaptureGlobal> globals;
};

struct CaptureRequest {
  // Must be open; its context entry points, cuMemHostAlloc/cuMemFreeHost and cuMemcpyDtoH are
  // used.
  driver::DriverTable* driver = nullptr;
  // Pushed current for the capture and popped afterwards; synchronised before any byte is read.
  CUcontext context = nullptr;
  std::string function;        // the store's naming rules apply
  std::string device_profile;  // "a100-pcie4", or the GPU's name
  int32_t compute_capability = 0;
  std::vector<CaptureBuffer> buffers;
  std::vector<CaptureModule> modules;
  // Virtual handles the function holds, recorded as they are (restore recreates them).
  std::vector<store::StreamState> streams;
  std::vector<store::EventState> events;
  std::vector<store::LibraryHandle> library_handles;
  // The instance address space the buffers come from (0, 0: none) and the virtual handle counter
  // (see store::Manifest).
  uint64_t va_base = 0;
  uint64_t va_bytes = 0;
  uint64_t next_handle = 0;
  int32_t gpus = 1;
  std::vector<store::NcclCommState> nccl_comms;
  // The function's graphs and executable graphs (recreated by a restore under their handles).
  std::vector<store::GraphState> graphs;
  std::optional<store::CpuStateRef> cpu_state;
  // Where buffer `index`'s bytes [offset, offset + bytes) come from: a capture of a session that
  // runs on (docs/design.md D10) serves them as they were at its point. Unset: read from the
  // device, the context quiesced first.
  std::function<Status(size_t index, uint64_t offset, void* dst, size_t bytes)> read;
};

// Quiesces the context (cuCtxSynchronize; not when `request.read` serves the buffers), streams
// every buffer into a new snapshot of
// `request.function` chunk by chunk, adds the modules and handle settings, and commits once.
// Returns the committed version. Nothing is published on failure; errors name the buffer
// (index, label, address) or module that failed. InvalidArgument for a malformed request
// (no driver or context, empty function, a zero-size buffer, overlapping buffers, a module
// without bytes or with an unknown kind, a global without a name or bytes); FailedPrecondition
// when the globals hold more than store::kMaxGlobalBytes.
Result<uint64_t> CaptureGpuState(const CaptureRequest& request, store::Store& store);

// A soft recopy (docs/design.md D10) in two passes. The first streams every buffer through
// `request.read` (copies made while the function runs) into a new writer, uncommitted; the final
// stop writes the snapshot again over that writer, a buffer whose CaptureBuffer::precopied names
// a copy keeping that copy's chunks, the others read from the quiesced device.
struct Precopy {
  std::unique_ptr<store::SnapshotWriter> writer;
  std::vector<store::Buffer> buffers;  // request.buffers' copies, in its order, taken out of the writer
};
// The first pass. InvalidArgument also when `request.read` is unset.
Result<Precopy> PrecopyBuffers(const CaptureRequest& request, store::Store& store);
// CaptureGpuState up to its commit, over `ahead`'s writer when given: the snapshot written,
// uncommitted. Internal when a buffer names a copy `ahead` does not hold or of another size.
Result<std::unique_ptr<store::SnapshotWriter>> WriteCapture(const CaptureRequest& request, store::Store& store,
                                                            Precopy* ahead = nullptr);
// Commits what WriteCapture wrote as a new version of `function`.
Result<uint64_t> CommitCapture(std::unique_ptr<store::SnapshotWriter> writer, store::Store& store,
                               const std::string& function);

}  // namespace phos::runtime
