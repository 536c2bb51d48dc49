// The device memory a remoted cuBLAS call reads and writes, worked out from its ring record: one
// computation for phosd's argument checks (runtime/src/session_blas*.cc: every operand must lie in
// the session's buffers) and for the read/write-set speculation of a restoring instance
// (speculation.h), so that the two cannot disagree. A record names what a function process wrote:
// every enumeration, size, leading dimension and increment is checked here before it shapes a
// range, and a range whose arithmetic wraps spans the rest of the address space (no buffer owns
// it, and speculation then names every buffer from its pointer up).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "phos/ipc/wire.h"

namespace phos::runtime {

// Bytes per element of the cudaDataType values phosd serves (CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F,
// CUDA_R_64F, CUDA_C_32F, CUDA_C_64F); 0 for any other.
uint64_t BlasElementBytes(int32_t type);
// The cudaDataType of alpha and beta of a GEMM computing in `compute_type` into C of `c_type`
// (CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F); -1 for a combination of
// matrix and compute types phosd does not serve.
int32_t GemmScalarType(int32_t a_type, int32_t b_type, int32_t c_type, int32_t compute_type);
// Whether a host-mode scalar of `scalar_type` is zero (either sign; both parts of a complex).
bool BlasScalarIsZero(const ipc::BlasScalar& scalar, int32_t scalar_type);

// The bytes a BLAS operand spans, and whether it touches every one of them (no gaps between
// columns, batches or strided elements).
struct OperandRange {
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  bool dense = false;
};
// The extent of an operand whose arithmetic wraps (hostile sizes; the call itself is refused by
// its handler): every byte from its pointer up, never a wrapped, smaller range that a buffer could
// own.
OperandRange Unbounded(uint64_t ptr);
// A column-major rows x cols matrix with leading dimension `ld` (elements), `batch` of them
// `stride` elements apart (batch 1: stride unused; a negative stride puts the last matrix lowest,
// and the range starts below ptr). Empty (bytes 0) when rows or cols is 0 or ld is below rows (a
// record the checks refuse). phos::MatrixSpan computes it, as it does for simgpu's cuBLAS.
OperandRange MatrixRange(uint64_t ptr, int64_t rows, int64_t cols, int64_t ld, uint64_t elem_bytes,
                         int64_t batch = 1, int64_t stride = 0);
// A vector of n elements `inc` apart (BLAS: the storage starts at ptr whatever inc's sign; an
// increment of 0 names one element n times).
OperandRange VectorRange(uint64_t ptr, int64_t n, int64_t inc, uint64_t elem_bytes);

// One operand of a call: what it is (for logs), its range, and how the call uses it.
struct BlasOperand {
  const char* what = "";
  OperandRange range;
  bool written = false;
  // Written without being read first (a copy's destination, C with beta == 0): speculation then
  // need not load it when the range covers its buffer densely.
  bool overwritten = false;
};

// The operands of one call, or why its record is refused. Fixed capacity: speculation runs before
// every call of a restoring instance and allocates nothing.
class BlasOperands {
 public:
  static constexpr size_t kCapacity = 8;

  void Read(const char* what, OperandRange range) { Add({what, range, false, false}); }
  void Write(const char* what, OperandRange range, bool overwritten) {
    Add({what, range, true, overwritten});
  }
  // The record names something cuBLAS refuses (CUBLAS_STATUS_INVALID_VALUE) or phosd does not
  // serve; `why` is a static description for logs. The first refusal is kept.
  void Refuse(const char* why) {
    if (refusal_ == nullptr) refusal_ = why;
  }
  bool ok() const { return refusal_ == nullptr; }
  const char* refusal() const { return refusal_; }
  std::span<const BlasOperand> operands() const { return {items_.data(), size_}; }

 private:
  void Add(const BlasOperand& operand) {
    if (operand.range.bytes == 0) return;
    if (size_ == kCapacity) {
      Refuse("more operands than a cuBLAS call has");
      return;
    }
    items_[size_++] = operand;
  }

  std::array<BlasOperand, kCapacity> items_{};
  uint32_t size_ = 0;
  const char* refusal_ = nullptr;
};

BlasOperands Level1Operands(const ipc::BlasLevel1Args& a);
BlasOperands Level2Operands(const ipc::BlasLevel2Args& a);
BlasOperands Level3Operands(const ipc::BlasLevel3Args& a);
// A GEMM's operands: its matrices (all of a strided batch's); for a pointer-array batch, the three
// arrays of device pointers instead, whose entries name the matrices (GemmEntryOperands).
BlasOperands GemmOperands(const ipc::GemmArgs& a);
// The matrices of one entry of a pointer-array batch, at the entry's three pointers. `a` must be
// a record GemmOperands accepts.
BlasOperands GemmEntryOperands(const ipc::GemmArgs& a, uint64_t a_ptr, uint64_t b_ptr, uint64_t c_ptr);
// A cublasLtMatmul's operands: A and B (every matrix of the batch) read, C read unless beta is 0,
// D written, the bias vector read (bias epilogues), the workspace written. Refused: what cuBLASLt
// refuses (mismatched shapes, batch counts or leading dimensions) and what phosd does not serve
// (types other than fp32, fp16 and bf16 inputs computing in fp32, orders other than column and
// row, epilogues other than DEFAULT, RELU, BIAS, RELU_BIAS, GELU and GELU_BIAS).
BlasOperands LtMatmulOperands(const ipc::BlasLtMatmulArgs& a);

}  // namespace phos::runtime
