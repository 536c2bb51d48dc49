// Pieces shared by the routines' files (gemm.cc, level1.cc, level2.cc, level3.cc).
#pragma once

#include <cblas.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "blas/blas_ops.h"
#include "blas/half.h"
#include "blas/operand_ranges.h"
#include "device/device_access.h"
#include "phos/base/enum_value.h"
#include "phos/base/log.h"

namespace phos::sim::blas {

// Element i of a stored fp32, fp16 or bf16 array, widened to fp32, and back. Through its bytes: a
// tenant's operand need not be aligned to its element type (UBSan reported a misaligned fp32 load
// in cublasLtMatmul).
inline float Widen1(const void* base, int64_t i, uint32_t type) {
  const char* at = static_cast<const char*>(base) + i * (type == CUDA_R_32F ? 4 : 2);
  if (type == CUDA_R_32F) {
    float v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
  uint16_t v;
  std::memcpy(&v, at, sizeof v);
  return type == CUDA_R_16F ? HalfToFloat(v) : BfloatToFloat(v);
}
inline void Narrow1(float v, void* base, int64_t i, uint32_t type) {
  char* at = static_cast<char*>(base) + i * (type == CUDA_R_32F ? 4 : 2);
  if (type == CUDA_R_32F) {
    std::memcpy(at, &v, sizeof v);
    return;
  }
  const uint16_t h = type == CUDA_R_16F ? FloatToHalf(v) : FloatToBfloat(v);
  std::memcpy(at, &h, sizeof h);
}

// Enumeration arguments are read through their bytes until checked (phos::EnumValue; UBSan,
// -fsanitize=enum, reported an operation of 7 loaded as cublasOperation_t).
inline bool ValidOperation(const cublasOperation_t& op) {
  const int v = EnumValue(op);
  return v == CUBLAS_OP_N || v == CUBLAS_OP_T || v == CUBLAS_OP_C;
}
inline bool ValidFill(const cublasFillMode_t& uplo) {
  const int v = EnumValue(uplo);
  return v == CUBLAS_FILL_MODE_LOWER || v == CUBLAS_FILL_MODE_UPPER;
}
inline bool ValidDiag(const cublasDiagType_t& diag) {
  const int v = EnumValue(diag);
  return v == CUBLAS_DIAG_NON_UNIT || v == CUBLAS_DIAG_UNIT;
}
inline bool ValidSide(const cublasSideMode_t& side) {
  const int v = EnumValue(side);
  return v == CUBLAS_SIDE_LEFT || v == CUBLAS_SIDE_RIGHT;
}
// For real data CUBLAS_OP_C is CUBLAS_OP_T.
inline bool Transposed(cublasOperation_t op) {
  return op != CUBLAS_OP_N;
}
inline CBLAS_TRANSPOSE ToCblas(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? CblasNoTrans : op == CUBLAS_OP_T ? CblasTrans : CblasConjTrans;
}
inline CBLAS_UPLO ToCblas(cublasFillMode_t uplo) {
  return uplo == CUBLAS_FILL_MODE_UPPER ? CblasUpper : CblasLower;
}
inline CBLAS_DIAG ToCblas(cublasDiagType_t diag) {
  return diag == CUBLAS_DIAG_UNIT ? CblasUnit : CblasNonUnit;
}
inline CBLAS_SIDE ToCblas(cublasSideMode_t side) {
  return side == CUBLAS_SIDE_RIGHT ? CblasRight : CblasLeft;
}

// Elements [first, end) of a vector of `count` elements with increment inc, as a vector of their
// own: BLAS addresses a vector with inc < 0 from its lowest address, where its last element is.
template <typename T>
T* SubVector(T* base, int64_t count, int inc, int64_t first, int64_t end) {
  return inc >= 0 ? base + first * inc : base + (count - end) * static_cast<int64_t>(-inc);
}

// Checks `ranges` now (CUBLAS_STATUS_INVALID_VALUE, logged, when one is not readable device
// memory) and enqueues a compute op of `blocks` blocks that checks them again, writes included,
// when it runs (an output mapped read-only faults there: sticky CUDA_ERROR_ILLEGAL_ADDRESS, as on
// a GPU), then calls `run(first, end)` on contiguous block ranges across the device's compute
// workers; `run` may itself return an error (a pointer-array entry that is no device memory).
// The op's sequence number on the stream goes to *seq when given.
template <typename Run>
cublasStatus_t EnqueueBlasOp(const BlasTarget& target, const char* routine,
                             std::shared_ptr<const OperandRanges> ranges, uint64_t blocks, uint64_t bytes,
                             Run run, uint64_t* seq = nullptr) {
  DeviceAccess& device = *target.device;
  if (const OperandRange* bad = ranges->FirstInvalid(device, /*readable_only=*/true)) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "{}: {}: CUBLAS_STATUS_INVALID_VALUE", routine,
                       OperandRanges::Describe(*bad));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Op op;
  op.engine = Engine::kCompute;
  // Like a kernel's: the launch overhead is modelled, the arithmetic runs at CPU speed.
  op.cost_seconds = target.ctx->profile->kernel_launch_s;
  op.bytes = bytes;
  op.blocks = blocks;
  op.run_blocks = [&device, routine, ranges = std::move(ranges), run = std::move(run)](
                      uint64_t first, uint64_t end) -> CUresult {
    if (const OperandRange* bad = ranges->FirstInvalid(device)) {
      PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "{} at run time: {}: illegal address", routine,
                         OperandRanges::Describe(*bad));
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if constexpr (std::is_same_v<decltype(run(first, end)), CUresult>) {
      return run(first, end);
    } else {
      run(first, end);
      return CUDA_SUCCESS;
    }
  };
  const uint64_t enqueued = target.stream->Enqueue(std::move(op));
  if (seq != nullptr) *seq = enqueued;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace phos::sim::blas
