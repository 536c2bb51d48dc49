#include "phos/runtime/speculation.h"

#include <cublas_v2.h>

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

namespace {
// The extent of an operand whose arithmetic wraps (hostile sizes; the call itself is refused by
// its handler): every buffer from its pointer up, never a wrapped, smaller range that would leave
// buffers it may touch out of the sets.
OperandRange Unbounded(uint64_t ptr) { return {ptr, UINT64_MAX, false}; }
}  // namespace

OperandRange MatrixRange(uint64_t ptr, int64_t rows, int64_t cols, int64_t ld, uint64_t elem_bytes,
                         int64_t batch, int64_t stride) {
  if (rows <= 0 || cols <= 0 || batch <= 0 || ld < rows) return {ptr, 0, false};
  int64_t elems = 0;  // of one matrix: (cols - 1) * ld + rows
  uint64_t one = 0;
  if (__builtin_mul_overflow(cols - 1, ld, &elems) || __builtin_add_overflow(elems, rows, &elems) ||
      __builtin_mul_overflow(static_cast<uint64_t>(elems), elem_bytes, &one)) {
    return Unbounded(ptr);
  }
  uint64_t span = one;
  if (batch != 1) {
    int64_t gap = 0;  // elements from the first matrix to the last
    uint64_t gap_bytes = 0;
    if (stride < 0 || __builtin_mul_overflow(batch - 1, stride, &gap) ||
        __builtin_mul_overflow(static_cast<uint64_t>(gap), elem_bytes, &gap_bytes) ||
        __builtin_add_overflow(one, gap_bytes, &span)) {
      return Unbounded(ptr);
    }
  }
  int64_t matrix = 0;
  const bool dense_one = ld == rows || cols == 1;
  const bool dense = dense_one && (batch == 1 || (!__builtin_mul_overflow(rows, cols, &matrix) && stride == matrix));
  return {ptr, span, dense};
}

OperandRange VectorRange(uint64_t ptr, int64_t n, int64_t inc, uint64_t elem_bytes) {
  if (n <= 0 || inc == 0) return {ptr, 0, false};
  int64_t step = 0;
  int64_t elems = 0;  // 1 + (n - 1) * |inc|
  uint64_t bytes = 0;
  if (__builtin_sub_overflow(int64_t{0}, inc, &step) || __builtin_mul_overflow(n - 1, inc < 0 ? step : inc, &elems) ||
      __builtin_add_overflow(elems, 1, &elems) ||
      __builtin_mul_overflow(static_cast<uint64_t>(elems), elem_bytes, &bytes)) {
    return Unbounded(ptr);
  }
  if (inc > 0) step = inc;
  return {ptr, bytes, step == 1 || n == 1};
}

void SpeculateBlas(const BufferTable& table, const BlasOperands& operands, AccessSets* sets) {
  AddRange(table, operands.in0.ptr, operands.in0.bytes, /*write=*/false, false, sets);
  AddRange(table, operands.in1.ptr, operands.in1.bytes, /*write=*/false, false, sets);
  // With beta != 0 cuBLAS reads C before writing it; `dense` false then keeps it in the read set.
  AddRange(table, operands.out.ptr, operands.out.bytes, /*write=*/true,
           operands.beta_zero && operands.out.dense, sets);
}

BlasOperands GemmOperands(const ipc::GemmArgs& a, uint64_t a_elem_bytes, uint64_t b_elem_bytes,
                          uint64_t c_elem_bytes) {
  bool ta = a.trans_a != CUBLAS_OP_N, tb = a.trans_b != CUBLAS_OP_N;
  int64_t batch = a.batch == 0 ? 1 : a.batch;
  BlasOperands ops;
  if (a.m <= 0 || a.n <= 0) return ops;  // cuBLAS returns at once
  // k == 0 reads neither A nor B (C = beta C).
  if (a.k > 0) {
    ops.in0 = MatrixRange(a.a, ta ? a.k : a.m, ta ? a.m : a.k, a.lda, a_elem_bytes, batch, a.stride_a);
    ops.in1 = MatrixRange(a.b, tb ? a.n : a.k, tb ? a.k : a.n, a.ldb, b_elem_bytes, batch, a.stride_b);
  }
  ops.out = MatrixRange(a.c, a.m, a.n, a.ldc, c_elem_bytes, batch, a.stride_c);
  ops.beta_zero = a.beta == 0.0f;
  return ops;
}

BlasOperands GemvOperands(const ipc::GemvArgs& a) {
  bool t = a.trans != CUBLAS_OP_N;
  BlasOperands ops;
  if (a.m <= 0 || a.n <= 0) return ops;  // cuBLAS returns at once
  ops.in0 = MatrixRange(a.a, a.m, a.n, a.lda, 4);
  ops.in1 = VectorRange(a.x, t ? a.m : a.n, a.incx, 4);
  ops.out = VectorRange(a.y, t ? a.n : a.m, a.incy, 4);
  ops.beta_zero = a.beta == 0.0f;
  return ops;
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

}  // namespace phos::runtime
