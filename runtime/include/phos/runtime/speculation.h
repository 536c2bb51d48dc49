// Read/write-set speculation (docs/design.md D8, issue 6): before a remoted launch, copy, memset or cuBLAS
// call runs on a restoring instance, which of the instance's buffers it may read and write. The
// restore path makes the absent ones jump the load queue and has the call wait on their ready
// events on its stream.
//
// Rules. A kernel's pointer parameters (param_metadata.h) are looked up in the instance's buffer
// table: const T* reads the buffer it points into, T* reads and writes it. Parameters of any
// other kind are scanned: every 8-byte-aligned word that falls inside a buffer names it for read
// and write. A pointer into the middle of a buffer names the whole buffer. A write that may not
// cover its whole buffer also counts as a read (partial writes exist: the bytes it leaves must be
// the snapshot's), so WriteSet ⊆ ReadSet except for buffers provably overwritten in full
// (a copy or memset covering the whole buffer; a cuBLAS output the call overwrites without
// reading, covering it densely: C of a GEMM with beta == 0, y of a copy). Words that fall in no buffer (floats, sizes, host or freed addresses) name nothing;
// whether a pointer is legal at all is the API server's isolation check, not speculation's.
//
// Speculation runs before every call until the instance is fully resident, so it allocates
// nothing: the sets are fixed arrays, and a call naming more distinct buffers than they hold
// marks its sets overflowed, which the caller must treat as "every buffer" (still correct, only
// slower). bench/speculation_bench.cc measures it.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "phos/base/status.h"
#include "phos/ipc/wire.h"
#include "phos/runtime/blas_operands.h"
#include "phos/runtime/buffer_table.h"
#include "phos/runtime/param_metadata.h"

namespace phos::runtime {

// A whole buffer of the table: its base and size.
struct BufferRef {
  uint64_t base = 0;
  uint64_t bytes = 0;
  friend bool operator==(const BufferRef&, const BufferRef&) = default;
};

// A set of distinct buffers, at most kCapacity of them; adding one more sets overflowed().
class BufferSet {
 public:
  // 32 buffers (512 bytes per set) keeps both sets on the caller's stack and the duplicate
  // check a short linear scan; a call naming more falls back to "every buffer", which is correct.
  static constexpr size_t kCapacity = 32;

  void Add(const BufferRef& buffer);
  bool Contains(uint64_t base) const;
  std::span<const BufferRef> buffers() const { return {items_.data(), size_}; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // More distinct buffers were named than fit: the set is incomplete.
  bool overflowed() const { return overflowed_; }
  void Clear() {
    size_ = 0;
    overflowed_ = false;
  }

 private:
  std::array<BufferRef, kCapacity> items_{};
  uint32_t size_ = 0;
  bool overflowed_ = false;
};

using ReadSet = BufferSet;
using WriteSet = BufferSet;

// What one call may touch. A buffer in `write` and not in `read` is overwritten in full: it need
// not be loaded first, but nothing loaded later may overwrite it.
struct AccessSets {
  ReadSet read;
  WriteSet write;

  // Both sets hold every buffer named; false: treat the call as touching all buffers.
  bool complete() const { return !read.overflowed() && !write.overflowed(); }
  void Clear() {
    read.Clear();
    write.Clear();
  }
};

// The buffer of `table` holding address `addr`, into *out; false when none does.
bool FindBuffer(const BufferTable& table, uint64_t addr, BufferRef* out);

// Adds the launch's buffers to *sets. `params` is the packed parameter buffer; InvalidArgument
// when it is shorter than meta.param_bytes.
Status SpeculateLaunch(const KernelParamMetadata& meta, std::span<const uint8_t> params,
                       const BufferTable& table, AccessSets* sets);

// The host side of a copy: device address 0 is never a buffer, so it names nothing.
inline constexpr uint64_t kHostSide = 0;

// A copy of `bytes` from `src` to `dst` (either may be kHostSide): the source's buffers are read;
// the destination's are written, and read too where the copy does not cover the whole buffer.
// A range spanning adjacent buffers names each of them.
void SpeculateCopy(const BufferTable& table, uint64_t dst, uint64_t src, uint64_t bytes, AccessSets* sets);
// A memset of `bytes` at `dst`: written, and read too unless it covers the whole buffer.
void SpeculateMemset(const BufferTable& table, uint64_t dst, uint64_t bytes, AccessSets* sets);
// A 2D copy or memset side: `height` rows of `width` bytes, `pitch` apart, from `ptr` (kHostSide:
// none). Every buffer the span from the first row to the end of the last meets is read, or
// written (and read, since the gaps between rows keep their bytes, unless the rows are dense
// and cover it); a span that wraps reaches every buffer from `ptr` up.
void SpeculatePitched(const BufferTable& table, uint64_t ptr, uint64_t pitch, uint64_t width, uint64_t height,
                      bool write, AccessSets* sets);

// One node of an executable graph as a launch of it speculates (wire.h's GraphNode): a kernel
// node's packed parameters and its function's metadata (null when not known), a memcpy's or
// memset's rows.
struct GraphNodeAccess {
  const ipc::GraphNode* node = nullptr;
  std::span<const uint8_t> params;
  const KernelParamMetadata* meta = nullptr;
};
// A graph launch touches what each of its nodes touches: the union of their sets (a buffer one
// node overwrites in full and another reads stays read). NotFound when a kernel node's parameters
// are not known or not understood: the launch may touch any buffer.
Status SpeculateGraphLaunch(std::span<const GraphNodeAccess> nodes, const BufferTable& table, AccessSets* sets);

// Every operand of a remoted cuBLAS call (blas_operands.h): read, or written — and read too
// unless it is overwritten (not read first) and covers its whole buffer densely.
void SpeculateBlas(const BufferTable& table, const BlasOperands& operands, AccessSets* sets);
// A pointer-array batched GEMM, its three arrays read (the caller's copies of them: `a`, `b` and
// `c` hold the entries' device pointers, one per matrix): the arrays' own buffers, and every
// matrix an entry names. Nothing for a record GemmOperands refuses.
void SpeculateGemmBatch(const BufferTable& table, const ipc::GemmArgs& args, std::span<const uint64_t> a,
                        std::span<const uint64_t> b, std::span<const uint64_t> c, AccessSets* sets);

// The device memory one rank's NCCL call touches: `send` read, `recv` written (and read too where
// it does not cover its buffer), a pre-multiplied sum's device scalar read (set by the caller,
// which knows the op). `overflow`: a byte count wraps; the handler refuses the call, and the
// ranges reach every buffer from their pointers up.
struct NcclOperands {
  OperandRange send;
  OperandRange recv;
  OperandRange scalar;
  bool overflow = false;
};
// A collective on rank `rank` of `nranks`, of elements of `elem_bytes`: a broadcast reads the
// root's send buffer only, a reduce writes the root's receive buffer only, an all-gather receives
// and a reduce-scatter sends nranks * count elements, the rest count elements each way.
NcclOperands NcclCollectiveOperands(const ipc::NcclCollectiveArgs& args, uint64_t elem_bytes, int nranks, int rank);
// ncclSend reads count elements of its buffer, ncclRecv writes them.
NcclOperands NcclPointToPointOperands(const ipc::NcclP2pArgs& args, bool send, uint64_t elem_bytes);
void SpeculateNccl(const BufferTable& table, const NcclOperands& operands, AccessSets* sets);

}  // namespace phos::runtime
