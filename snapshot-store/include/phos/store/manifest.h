// The manifest of a pre-entry snapshot (docs/design.md D6): what a restore needs besides the chunk
// bytes, as plain C++ types, and the envelope that frames it on disk and in RocksDB.
//
// The serialized payload is protobuf (snapshot-store/proto/manifest.proto); the conversion lives
// in snapshot-store/src only, so the on-disk schema can grow without touching the runtime.
//
//   offset  size  field
//        0     8  magic "PHOSSNAP"
//        8     4  format version (little-endian; kManifestFormatVersion), apart from the
//                 product version: it changes only when the framing or the meaning of the
//                 payload changes incompatibly
//       12     4  flags (none defined; a set bit means a newer writer and is refused)
//       16     8  payload length
//       24     8  XXH3-64 of the payload
//       32     …  payload: the serialized manifest
//
// Decoding refuses a bad magic, an unknown or newer format version, unknown flags, a payload
// longer than the cap, truncation, trailing bytes, a checksum mismatch and a payload that does not
// parse or holds a malformed chunk id, each with a message saying which and what was found
// (Firecracker's snapshot format does the same).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/store/chunk.h"

namespace phos::store {

// How a buffer is used after entry, as observed during capture.
enum class AccessClass : int32_t {
  kUnknown = 0,    // not observed
  kReadOnly = 1,   // weights: read by kernels, never written after entry
  kReadWrite = 2,  // state the function updates
  kScratch = 3,    // written before read after entry: need not be restored
};
// "unknown", "read-only", "read-write" or "scratch".
std::string_view AccessClassName(AccessClass access_class);

// A device buffer of the function.
struct Buffer {
  uint64_t device_address = 0;  // restored at this address (docs/design.md D5)
  uint64_t size = 0;
  uint64_t alignment = 0;
  std::vector<ChunkRef> chunks;   // in address order; together `size` bytes
  int32_t first_touch_rank = -1;  // order of first use after entry; -1: not recorded
  AccessClass access_class = AccessClass::kUnknown;
  std::string label;   // for humans (phos-snapshot inspect)
  int32_t device = 0;  // the function's device (0 for single-GPU functions)

  friend bool operator==(const Buffer&, const Buffer&) = default;
};

// A module global (a __device__ or __constant__ variable) the function named, with its bytes at
// capture. Its address is the driver's choice at each load, so a restore writes the bytes to
// wherever the module's global lies then. Held in the manifest itself, not in chunks: globals
// are small (constant memory is 64 KiB), and a capture refuses more than kMaxGlobalBytes.
struct ModuleGlobal {
  std::string name;      // as cuModuleGetGlobal names it (nvcc's mangled name)
  std::string contents;  // its bytes; the global's size

  friend bool operator==(const ModuleGlobal&, const ModuleGlobal&) = default;
};
// The most global bytes one snapshot holds (all modules together).
inline constexpr uint64_t kMaxGlobalBytes = 16ull << 20;

// A module image the function loaded.
struct Module {
  ChunkId content_hash;  // xxHash3-128 of the whole image
  uint64_t size = 0;
  std::string kind;  // "simgpu" or "fatbin"
  std::vector<ChunkRef> chunks;
  std::vector<ModuleGlobal> globals;

  friend bool operator==(const Module&, const Module&) = default;
};

struct StreamState {
  uint64_t handle = 0;  // the virtual handle the function holds
  uint32_t flags = 0;
  int32_t priority = 0;
  int32_t device = 0;  // the function's device it belongs to

  friend bool operator==(const StreamState&, const StreamState&) = default;
};

struct EventState {
  uint64_t handle = 0;
  uint32_t flags = 0;
  int32_t device = 0;

  friend bool operator==(const EventState&, const EventState&) = default;
};

struct LibraryHandle {
  uint64_t handle = 0;
  std::string library;  // "cublas"
  uint64_t stream = 0;  // virtual stream handle set on it
  uint32_t math_mode = 0;
  int32_t device = 0;

  friend bool operator==(const LibraryHandle&, const LibraryHandle&) = default;
};

// An NCCL communicator rank the function holds: the rank of its device in the device group's
// communicator (functions of several GPUs).
struct NcclCommState {
  uint64_t handle = 0;
  int32_t device = 0;

  friend bool operator==(const NcclCommState&, const NcclCommState&) = default;
};

// A node of a CUDA graph the function holds (phosd's form of it, runtime/src/session_graphs.h).
// A kernel is named by its mangled name, found again in the restored session's modules: kernel
// handles are the session's and do not survive a restore; addresses and event handles do.
struct GraphNodeState {
  int32_t type = 0;    // CUgraphNodeType
  bool live = true;    // false: destroyed, its index kept so later indices stay
  std::vector<uint32_t> depends;
  std::string kernel;  // kernel: mangled name
  std::string params;  // kernel: the packed parameter buffer
  std::vector<uint32_t> grid, block;  // kernel: 3 each
  uint32_t shared_bytes = 0;
  uint64_t dst = 0, dst_pitch = 0, src = 0, src_pitch = 0, width = 0, height = 0;  // memcpy, memset
  uint32_t value = 0, element_size = 0;                                             // memset
  uint64_t event = 0;  // event record and wait: the virtual event

  friend bool operator==(const GraphNodeState&, const GraphNodeState&) = default;
};

// A graph or an executable graph the function holds, recreated under its handle by a restore
// (an executable one instantiated again there).
struct GraphState {
  uint64_t handle = 0;
  int32_t device = 0;
  bool executable = false;
  std::vector<GraphNodeState> nodes;

  friend bool operator==(const GraphState&, const GraphState&) = default;
};

// Where the function's CPU state is kept. Empty kind and location: none recorded.
struct CpuStateRef {
  std::string kind;      // "fork-template" or "criu"
  std::string location;  // e.g. the CRIU image directory

  friend bool operator==(const CpuStateRef&, const CpuStateRef&) = default;
};

struct Manifest {
  std::string function;
  uint64_t version = 0;
  std::string device_profile;  // "a100-pcie4", or the GPU name on real hardware
  int32_t compute_capability = 0;
  uint32_t chunk_bytes = 0;
  std::vector<Buffer> buffers;
  std::vector<Module> modules;
  std::vector<StreamState> streams;
  std::vector<EventState> events;
  std::vector<LibraryHandle> library_handles;
  CpuStateRef cpu_state;
  int64_t created_unix_ms = 0;
  // The instance's address space (runtime/va_allocator.h) the buffers were carved from: restore
  // reserves the same range before mapping them. 0: buffers were not from an instance space.
  uint64_t va_base = 0;
  uint64_t va_bytes = 0;
  // The function's virtual handle counter when captured: handles the restored session issues
  // continue after it, so they never collide with those the function holds.
  uint64_t next_handle = 0;
  // Devices the function uses (0 or 1: one; more: a device group, each buffer's `device` says
  // which), and its communicators.
  int32_t gpus = 0;
  std::vector<NcclCommState> nccl_comms;
  std::vector<GraphState> graphs;

  friend bool operator==(const Manifest&, const Manifest&) = default;
};

inline constexpr char kManifestMagic[8] = {'P', 'H', 'O', 'S', 'S', 'N', 'A', 'P'};
inline constexpr uint32_t kManifestFormatVersion = 1;
inline constexpr size_t kManifestHeaderBytes = 32;
// A manifest lists buffers and chunk ids, and no bytes but module globals' (at most
// kMaxGlobalBytes): 64 MiB is ~2 M chunk refs, far beyond any device's memory at the default
// chunk size, and small enough that a corrupt length cannot make a load allocate without bound.
inline constexpr uint64_t kDefaultManifestCap = 64ull << 20;

// Every chunk `manifest` references (its buffers' and modules'), once each, in the order they first
// appear.
std::vector<ChunkRef> ChunksOf(const Manifest& manifest);

// The envelope around `manifest`.
std::string EncodeManifest(const Manifest& manifest);
// The manifest inside `bytes`, or Corruption / NotSupported saying what is wrong.
Result<Manifest> DecodeManifest(std::string_view bytes, uint64_t max_payload = kDefaultManifestCap);

// Writes the envelope to `path` atomically (temporary file, fsync, rename).
Status WriteManifestFile(const std::string& path, const Manifest& manifest);
// Reads and decodes `path`; errors name the file.
Result<Manifest> ReadManifestFile(const std::string& path, uint64_t max_payload = kDefaultManifestCap);

}  // namespace phos::store
