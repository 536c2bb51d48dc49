// cuBLAS Level 1 in S and D: axpy, dot, nrm2, scal, asum, iamax, iamin, copy, swap, rot. Each is
// one op of one block: a vector routine is bound by memory, not by the workers it could use.
#include <algorithm>

#include "blas/blas_internal.h"
#include "blas/cblas_typed.h"
#include "blas/scalar.h"

namespace phos::sim::blas {
namespace {

const char* Name(Level1 routine) {
  switch (routine) {
    case Level1::kAxpy:
      return "axpy";
    case Level1::kDot:
      return "dot";
    case Level1::kNrm2:
      return "nrm2";
    case Level1::kScal:
      return "scal";
    case Level1::kAsum:
      return "asum";
    case Level1::kIamax:
      return "iamax";
    case Level1::kIamin:
      return "iamin";
    case Level1::kCopy:
      return "copy";
    case Level1::kSwap:
      return "swap";
    case Level1::kRot:
      return "rot";
  }
  return "level 1";
}

bool IsReduction(Level1 r) {
  return r == Level1::kDot || r == Level1::kNrm2 || r == Level1::kAsum || r == Level1::kIamax ||
         r == Level1::kIamin;
}
bool IsIndex(Level1 r) {
  return r == Level1::kIamax || r == Level1::kIamin;
}

// A reduction's result: the element type's value, or a 1-based index (0 when nothing was looked at).
template <typename T>
struct Result {
  T value{};
  int index = 0;
};

template <typename T>
cublasStatus_t Enqueue(const BlasTarget& target, const Level1Call& c) {
  const Level1 routine = c.routine;
  const bool reduction = IsReduction(routine);
  const bool device_mode = target.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  const uint32_t result_bytes = IsIndex(routine) ? sizeof(int) : sizeof(T);
  if (reduction && c.result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const int n = std::max(c.n, 0);
  // Reference BLAS: the one-vector reductions (dot aside) and scal look at nothing for incx <= 0.
  const bool x_positive_only = routine != Level1::kDot && (reduction || routine == Level1::kScal);
  const int used = x_positive_only && c.incx <= 0 ? 0 : n;
  if (!reduction && used == 0) return CUBLAS_STATUS_SUCCESS;
  if (reduction && used == 0 && !device_mode) {
    // Nothing to read: the result is 0 at once.
    std::memset(c.result, 0, result_bytes);
    return CUBLAS_STATUS_SUCCESS;
  }

  auto ranges = std::make_shared<OperandRanges>();
  ScalarArg alpha, beta;
  const bool scaled = routine == Level1::kAxpy || routine == Level1::kScal || routine == Level1::kRot;
  if (scaled && !alpha.Take(target.pointer_mode, c.alpha, sizeof(T), "alpha", ranges.get())) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (routine == Level1::kRot && !beta.Take(target.pointer_mode, c.beta, sizeof(T), "s", ranges.get())) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (routine == Level1::kAxpy && alpha.KnownEqual(T{0})) return CUBLAS_STATUS_SUCCESS;
  const bool writes_x = routine == Level1::kScal || routine == Level1::kSwap || routine == Level1::kRot;
  const bool reads_y = routine == Level1::kDot;
  const bool has_y = reads_y || routine == Level1::kAxpy || routine == Level1::kCopy ||
                     routine == Level1::kSwap || routine == Level1::kRot;
  bool ok =
      ranges->AddVector("x", c.x, used, c.incx, sizeof(T), writes_x ? Access::kReadWrite : Access::kRead);
  if (has_y)
    ok = ok &&
         ranges->AddVector("y", c.y, used, c.incy, sizeof(T), reads_y ? Access::kRead : Access::kReadWrite);
  if (reduction && device_mode)
    ok = ok && ranges->AddVector("result", c.result, 1, 1, result_bytes, Access::kReadWrite);
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;

  auto result = std::make_shared<Result<T>>();
  auto run = [c, used, alpha, beta, device_mode, result_bytes, result](uint64_t, uint64_t) {
    T* x = static_cast<T*>(c.x);
    T* y = static_cast<T*>(c.y);
    Result<T>& r = *result;
    switch (c.routine) {
      case Level1::kAxpy:
        cblas::axpy(used, alpha.As<T>(), x, c.incx, y, c.incy);
        break;
      case Level1::kDot:
        r.value = used > 0 ? cblas::dot(used, x, c.incx, y, c.incy) : T{0};
        break;
      case Level1::kNrm2:
        r.value = used > 0 ? cblas::nrm2(used, x, c.incx) : T{0};
        break;
      case Level1::kAsum:
        r.value = used > 0 ? cblas::asum(used, x, c.incx) : T{0};
        break;
      case Level1::kIamax:
        r.index = used > 0 ? static_cast<int>(cblas::iamax(used, x, c.incx)) + 1 : 0;
        break;
      case Level1::kIamin:
        r.index = used > 0 ? static_cast<int>(cblas::iamin(used, x, c.incx)) + 1 : 0;
        break;
      case Level1::kScal:
        cblas::scal(used, alpha.As<T>(), x, c.incx);
        break;
      case Level1::kCopy:
        cblas::copy(used, x, c.incx, y, c.incy);
        break;
      case Level1::kSwap:
        cblas::swap(used, x, c.incx, y, c.incy);
        break;
      case Level1::kRot:
        cblas::rot(used, x, c.incx, y, c.incy, alpha.As<T>(), beta.As<T>());
        break;
    }
    if (device_mode && IsReduction(c.routine)) {
      std::memcpy(c.result, IsIndex(c.routine) ? static_cast<const void*>(&r.index) : &r.value, result_bytes);
    }
  };
  uint64_t seq = 0;
  const uint64_t bytes = static_cast<uint64_t>(used) * sizeof(T) * (has_y ? 2 : 1);
  cublasStatus_t s = EnqueueBlasOp(target, Name(routine), std::move(ranges), 1, bytes, std::move(run), &seq);
  if (s != CUBLAS_STATUS_SUCCESS || !reduction || device_mode) return s;
  // Host pointer mode: the result is the caller's when the call returns, as cuBLAS's is.
  if (target.stream->Wait(seq) != CUDA_SUCCESS) return CUBLAS_STATUS_EXECUTION_FAILED;
  std::memcpy(c.result, IsIndex(routine) ? static_cast<const void*>(&result->index) : &result->value,
              result_bytes);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t EnqueueLevel1(const BlasTarget& target, const Level1Call& call) {
  switch (EnumValue(call.type)) {
    case CUDA_R_32F:
      return Enqueue<float>(target, call);
    case CUDA_R_64F:
      return Enqueue<double>(target, call);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

}  // namespace phos::sim::blas
