// Pieces shared by gemm.cc and gemv.cc.
#pragma once

#include <cblas.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "blas/operand_ranges.h"
#include "device/device_access.h"
#include "phos/base/log.h"

namespace phos::sim::blas {

// Read through its bytes: a C caller may pass any integer, and loading a C++ enum object that
// holds none of the enumeration's values is undefined (UBSan, -fsanitize=enum, reported it for
// an operation of 7), so nothing reads `op` as a cublasOperation_t before this check.
inline bool ValidOperation(const cublasOperation_t& op) {
  int value = 0;
  static_assert(sizeof value == sizeof op);
  std::memcpy(&value, &op, sizeof value);
  return value == CUBLAS_OP_N || value == CUBLAS_OP_T || value == CUBLAS_OP_C;
}
// For real data CUBLAS_OP_C is CUBLAS_OP_T.
inline bool Transposed(cublasOperation_t op) {
  return op != CUBLAS_OP_N;
}
inline CBLAS_TRANSPOSE ToCblas(cublasOperation_t op) {
  return Transposed(op) ? CblasTrans : CblasNoTrans;
}

// Checks `ranges` now (CUBLAS_STATUS_INVALID_VALUE, logged, when one is not readable device
// memory) and enqueues a compute op of `blocks` blocks that checks them again, writes included,
// when it runs (an output mapped read-only faults there: sticky CUDA_ERROR_ILLEGAL_ADDRESS, as on
// a GPU), then calls `run(first, end)` on contiguous block ranges across the device's compute
// workers.
template <typename Run>
cublasStatus_t EnqueueBlasOp(DeviceAccess& device, const ContextRef& ctx, Stream& stream, const char* routine,
                             std::shared_ptr<const OperandRanges> ranges, uint64_t blocks, uint64_t bytes,
                             Run run) {
  if (const OperandRange* bad = ranges->FirstInvalid(device, /*readable_only=*/true)) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "{}: {}: CUBLAS_STATUS_INVALID_VALUE", routine,
                       OperandRanges::Describe(*bad));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Op op;
  op.engine = Engine::kCompute;
  // Like a kernel's: the launch overhead is modelled, the arithmetic runs at CPU speed.
  op.cost_seconds = ctx.profile->kernel_launch_s;
  op.bytes = bytes;
  op.blocks = blocks;
  op.run_blocks = [&device, routine, ranges = std::move(ranges), run = std::move(run)](uint64_t first,
                                                                                       uint64_t end) {
    if (const OperandRange* bad = ranges->FirstInvalid(device)) {
      PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "{} at run time: {}: illegal address", routine,
                         OperandRanges::Describe(*bad));
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    run(first, end);
    return CUDA_SUCCESS;
  };
  stream.Enqueue(std::move(op));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace phos::sim::blas
