#include "phos/runtime/speculation.h"

#include <cuda.h>


#include <cstring>
#include <iterator>
#include <string>

namespace phos::runtime {
namespace {

// Every buffer intersecting [ptr, ptr + bytes): read, or written — and read too unless the range
// covers the whole buffer and is `dense` (touches every byte in it).
void AddRange(const BufferTable& table, uint64_t ptr, uint64_t bytes, bool write, bool dense,
              AccessSets* sets) {
  if (ptr == kHostSide || bytes == 0) return;
  const auto& buffers = table.buffers();
  uint64_t end = ptr + bytes < ptr ? UINT64_MAX : ptr + bytes;
  auto it = buffers.upper_bound(ptr);
  if (it != buffers.begin()) {
    auto prev = std::prev(it);
    if (ptr < prev->first + prev->second) it = prev;
  }
  for (; it != buffers.end() && it->first < end; ++it) {
    BufferRef buffer{it->first, it->second};
    if (!write) {
      sets->read.Add(buffer);
      continue;
    }
    sets->write.Add(buffer);
    bool covers = dense && ptr <= buffer.base && end >= buffer.base + buffer.bytes;
    if (!covers) sets->read.Add(buffer);
  }
}

void AddPointer(const BufferTable& table, uint64_t word, bool write, AccessSets* sets) {
  BufferRef buffer;
  if (!FindBuffer(table, word, &buffer)) return;
  sets->read.Add(buffer);
  if (write) sets->write.Add(buffer);
}

}  // namespace

void BufferSet::Add(const BufferRef& buffer) {
  if (Contains(buffer.base)) return;
  if (size_ == kCapacity) {
    overflowed_ = true;
    return;
  }
  items_[size_++] = buffer;
}

bool BufferSet::Contains(uint64_t base) const {
  for (uint32_t i = 0; i < size_; ++i) {
    if (items_[i].base == base) return true;
  }
  return false;
}

bool FindBuffer(const BufferTable& table, uint64_t addr, BufferRef* out) {
  const auto& buffers = table.buffers();
  // Most scanned words are not addresses at all (floats, sizes, counts): the table's extent
  // rejects them without walking the tree.
  if (buffers.empty() || addr < buffers.begin()->first) return false;
  const auto& last = *buffers.rbegin();
  if (addr >= last.first + last.second) return false;
  auto it = buffers.upper_bound(addr);
  --it;  // exists: addr >= the first base
  if (addr - it->first >= it->second) return false;
  *out = {it->first, it->second};
  return true;
}

Status SpeculateLaunch(const KernelParamMetadata& meta, std::span<const uint8_t> params,
                       const BufferTable& table, AccessSets* sets) {
  if (params.size() < meta.param_bytes) {
    return Status::InvalidArgument("launch of '" + meta.name + "': " + std::to_string(params.size()) +
                                   " parameter bytes, the layout needs " + std::to_string(meta.param_bytes));
  }
  if (table.size() == 0) return Status::Ok();
  for (const ParamMeta& p : meta.params) {
    // Metadata built by hand may disagree with its own param_bytes; never read past the buffer.
    if (uint64_t{p.offset} + p.size > params.size()) {
      return Status::InvalidArgument("launch of '" + meta.name + "': parameter at " +
                                     std::to_string(p.offset) + " ends past the " +
                                     std::to_string(params.size()) + " parameter bytes");
    }
    if (p.access != ParamAccess::kScan && p.size == 8) {
      uint64_t word;
      std::memcpy(&word, params.data() + p.offset, sizeof(word));
      AddPointer(table, word, p.access == ParamAccess::kReadWrite, sets);
      continue;
    }
    // The PhOS rule: each 8-byte-aligned word of the parameter (alignment in the packed buffer,
    // which is where a device pointer inside a struct lands).
    uint64_t end = uint64_t{p.offset} + p.size;
    for (uint64_t o = (uint64_t{p.offset} + 7) & ~uint64_t{7}; o + 8 <= end; o += 8) {
      uint64_t word;
      std::memcpy(&word, params.data() + o, sizeof(word));
      AddPointer(table, word, /*write=*/true, sets);
    }
  }
  return Status::Ok();
}

void SpeculateCopy(const BufferTable& table, uint64_t dst, uint64_t src, uint64_t bytes, AccessSets* sets) {
  AddRange(table, src, bytes, /*write=*/false, /*dense=*/true, sets);
  AddRange(table, dst, bytes, /*write=*/true, /*dense=*/true, sets);
}

void SpeculateMemset(const BufferTable& table, uint64_t dst, uint64_t bytes, AccessSets* sets) {
  AddRange(table, dst, bytes, /*write=*/true, /*dense=*/true, sets);
}

void SpeculatePitched(const BufferTable& table, uint64_t ptr, uint64_t pitch, uint64_t width, uint64_t height,
                      bool write, AccessSets* sets) {
  if (width == 0 || height == 0) return;
  uint64_t rows = 0, span = 0;
  if (__builtin_mul_overflow(height - 1, pitch, &rows) || __builtin_add_overflow(rows, width, &span)) span = UINT64_MAX;
  const bool dense = height == 1 || pitch == width;
  AddRange(table, ptr, span, write, dense, sets);
}

void SpeculateBlas(const BufferTable& table, const BlasOperands& operands, AccessSets* sets) {
  for (const BlasOperand& op : operands.operands()) {
    AddRange(table, op.range.ptr, op.range.bytes, op.written, op.overwritten && op.range.dense, sets);
  }
}

void SpeculateGemmBatch(const BufferTable& table, const ipc::GemmArgs& args, std::span<const uint64_t> a,
                        std::span<const uint64_t> b, std::span<const uint64_t> c, AccessSets* sets) {
  const BlasOperands arrays = GemmOperands(args);
  if (!arrays.ok()) return;  // a record the session refuses touches nothing
  SpeculateBlas(table, arrays, sets);
  // k == 0 reads no A or B: the caller passes no entries for them then.
  for (size_t i = 0; i < c.size(); ++i) {
    SpeculateBlas(table, GemmEntryOperands(args, i < a.size() ? a[i] : 0, i < b.size() ? b[i] : 0, c[i]), sets);
  }
}

NcclOperands NcclCollectiveOperands(const ipc::NcclCollectiveArgs& a, uint64_t elem_bytes, int nranks, int rank) {
  NcclOperands ops;
  uint64_t bytes = 0, all_ranks = 0;
  if (__builtin_mul_overflow(a.count, elem_bytes, &bytes) ||
      __builtin_mul_overflow(bytes, static_cast<uint64_t>(nranks), &all_ranks)) {
    ops.send = Unbounded(a.send);
    ops.recv = Unbounded(a.recv);
    ops.overflow = true;
    return ops;
  }
  uint64_t send = bytes, recv = bytes;
  switch (static_cast<ipc::NcclCollectiveKind>(a.kind)) {
    case ipc::NcclCollectiveKind::kBroadcast:
      if (rank != a.root) send = 0;
      break;
    case ipc::NcclCollectiveKind::kReduce:
      if (rank != a.root) recv = 0;
      break;
    case ipc::NcclCollectiveKind::kAllGather:
      recv = all_ranks;
      break;
    case ipc::NcclCollectiveKind::kReduceScatter:
      send = all_ranks;
      break;
    default:
      break;
  }
  ops.send = {a.send, send, true};
  ops.recv = {a.recv, recv, true};
  return ops;
}

NcclOperands NcclPointToPointOperands(const ipc::NcclP2pArgs& a, bool send, uint64_t elem_bytes) {
  NcclOperands ops;
  uint64_t bytes = 0;
  OperandRange range{a.buffer, 0, true};
  if (__builtin_mul_overflow(a.count, elem_bytes, &bytes)) {
    range = Unbounded(a.buffer);
    ops.overflow = true;
  } else {
    range.bytes = bytes;
  }
  (send ? ops.send : ops.recv) = range;
  return ops;
}

void SpeculateNccl(const BufferTable& table, const NcclOperands& operands, AccessSets* sets) {
  AddRange(table, operands.send.ptr, operands.send.bytes, /*write=*/false, false, sets);
  AddRange(table, operands.scalar.ptr, operands.scalar.bytes, /*write=*/false, false, sets);
  AddRange(table, operands.recv.ptr, operands.recv.bytes, /*write=*/true, operands.recv.dense, sets);
}

Status SpeculateGraphLaunch(std::span<const GraphNodeAccess> nodes, const BufferTable& table, AccessSets* sets) {
  for (const GraphNodeAccess& n : nodes) {
    const ipc::GraphNode& p = *n.node;
    switch (p.type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: {
        if (n.meta == nullptr) return Status::NotFound("a kernel node's parameters are not known");
        if (Status s = SpeculateLaunch(*n.meta, n.params, table, sets); !s.ok()) return s;
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY:
        SpeculatePitched(table, p.src, p.src_pitch, p.width, p.height, /*write=*/false, sets);
        SpeculatePitched(table, p.dst, p.dst_pitch, p.width, p.height, /*write=*/true, sets);
        break;
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        uint64_t row = 0;
        // A row that wraps reaches every buffer from dst up, as a wrapping span does.
        if (__builtin_mul_overflow(p.width, uint64_t{p.element_size}, &row)) row = ~uint64_t{0};
        SpeculatePitched(table, p.dst, p.dst_pitch, row, p.height, /*write=*/true, sets);
        break;
      }
      default:  // events and empty nodes touch no memory
        break;
    }
  }
  return Status::Ok();
}

}  // namespace phos::runtime
