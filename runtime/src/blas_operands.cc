#include "phos/runtime/blas_operands.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "phos/base/strided_span.h"

namespace phos::runtime {

OperandRange Unbounded(uint64_t ptr) {
  return {ptr, UINT64_MAX, false};
}

namespace {

using ipc::BlasLevel1;
using ipc::BlasLevel2;
using ipc::BlasLevel3;

// The enumerations a record names, compared as integers before anything casts them (an
// out-of-range value in an enum type is undefined behaviour).
bool IsOperation(int32_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}
bool IsTriangle(int32_t uplo) {
  return uplo == CUBLAS_FILL_MODE_LOWER || uplo == CUBLAS_FILL_MODE_UPPER;
}
bool IsDiagonal(int32_t diag) {
  return diag == CUBLAS_DIAG_NON_UNIT || diag == CUBLAS_DIAG_UNIT;
}
bool IsSide(int32_t side) {
  return side == CUBLAS_SIDE_LEFT || side == CUBLAS_SIDE_RIGHT;
}
bool IsPointerMode(int32_t mode) {
  return mode == CUBLAS_POINTER_MODE_HOST || mode == CUBLAS_POINTER_MODE_DEVICE;
}
// The real types of Levels 1-3 besides GEMM (S and D).
bool IsRealType(int32_t type) {
  return type == CUDA_R_32F || type == CUDA_R_64F;
}
bool IsGemmAlgo(int32_t algo) {
  return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

uint64_t Address(const ipc::BlasScalar& s) {
  uint64_t ptr = 0;
  std::memcpy(&ptr, s.bytes, sizeof(ptr));
  return ptr;
}

// A scalar the call reads from device memory (device pointer mode); nothing in host mode.
void ReadScalar(BlasOperands* ops, const char* what, int32_t pointer_mode, const ipc::BlasScalar& s,
                uint64_t bytes) {
  if (pointer_mode == CUBLAS_POINTER_MODE_DEVICE) ops->Read(what, {Address(s), bytes, true});
}

// Whether beta is known to be zero when the call is made: only in host pointer mode.
bool BetaZero(int32_t pointer_mode, const ipc::BlasScalar& beta, int32_t scalar_type) {
  return pointer_mode == CUBLAS_POINTER_MODE_HOST && BlasScalarIsZero(beta, scalar_type);
}

bool Fp32Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}
bool Fp64Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_64F || c == CUBLAS_COMPUTE_64F_PEDANTIC;
}
bool Fp16Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_16F || c == CUBLAS_COMPUTE_16F_PEDANTIC;
}

}  // namespace

uint64_t BlasElementBytes(int32_t type) {
  switch (type) {
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_32F:
      return 4;
    case CUDA_R_64F:
    case CUDA_C_32F:
      return 8;
    case CUDA_C_64F:
      return 16;
    default:
      return 0;
  }
}

int32_t GemmScalarType(int32_t a_type, int32_t b_type, int32_t c_type, int32_t compute_type) {
  if (a_type != b_type) return -1;
  if (Fp32Compute(compute_type)) {
    if (a_type == CUDA_R_32F && c_type == CUDA_R_32F) return CUDA_R_32F;
    // Half and bfloat16 inputs accumulate in fp32, into fp32 or their own type.
    if ((a_type == CUDA_R_16F || a_type == CUDA_R_16BF) && (c_type == CUDA_R_32F || c_type == a_type))
      return CUDA_R_32F;
    if (a_type == CUDA_C_32F && c_type == CUDA_C_32F) return CUDA_C_32F;
    return -1;
  }
  if (Fp64Compute(compute_type)) {
    if (a_type == CUDA_R_64F && c_type == CUDA_R_64F) return CUDA_R_64F;
    if (a_type == CUDA_C_64F && c_type == CUDA_C_64F) return CUDA_C_64F;
    return -1;
  }
  if (Fp16Compute(compute_type) && a_type == CUDA_R_16F && c_type == CUDA_R_16F) return CUDA_R_16F;
  return -1;
}

bool BlasScalarIsZero(const ipc::BlasScalar& s, int32_t scalar_type) {
  switch (scalar_type) {
    case CUDA_R_16F: {
      uint16_t h = 0;
      std::memcpy(&h, s.bytes, sizeof(h));
      return (h & 0x7fffu) == 0;
    }
    case CUDA_R_32F:
    case CUDA_C_32F: {
      float v[2] = {};
      std::memcpy(v, s.bytes, sizeof(v));
      return v[0] == 0.0f && (scalar_type == CUDA_R_32F || v[1] == 0.0f);
    }
    case CUDA_R_64F:
    case CUDA_C_64F: {
      double v[2] = {};
      std::memcpy(v, s.bytes, sizeof(v));
      return v[0] == 0.0 && (scalar_type == CUDA_R_64F || v[1] == 0.0);
    }
    default:
      return false;
  }
}

OperandRange MatrixRange(uint64_t ptr, int64_t rows, int64_t cols, int64_t ld, uint64_t elem_bytes,
                         int64_t batch, int64_t stride) {
  if (rows <= 0 || cols <= 0 || batch <= 0 || ld < rows) return {ptr, 0, false};
  if (batch == 1) stride = 0;
  const std::optional<StridedSpan> span = MatrixSpan(ptr, rows, cols, ld, elem_bytes, batch, stride);
  if (!span) return Unbounded(ptr);
  int64_t matrix = 0;
  const bool dense_one = ld == rows || cols == 1;
  const bool dense =
      dense_one && (batch == 1 || (!__builtin_mul_overflow(rows, cols, &matrix) && stride == matrix));
  return {span->ptr, span->bytes, dense};
}

OperandRange VectorRange(uint64_t ptr, int64_t n, int64_t inc, uint64_t elem_bytes) {
  if (n <= 0) return {ptr, 0, false};
  const std::optional<StridedSpan> span = VectorSpan(ptr, n, inc, elem_bytes);
  if (!span) return Unbounded(ptr);
  return {span->ptr, span->bytes, inc == 1 || inc == -1 || inc == 0 || n == 1};
}

BlasOperands Level1Operands(const ipc::BlasLevel1Args& a) {
  BlasOperands ops;
  if (a.routine < 0 || a.routine >= static_cast<int32_t>(BlasLevel1::kCount)) ops.Refuse("Level 1 routine");
  if (!IsRealType(a.type)) ops.Refuse("data type (Level 1 serves float and double)");
  if (!IsPointerMode(a.pointer_mode)) ops.Refuse("pointer mode");
  if (!ops.ok()) return ops;
  const uint64_t elem = BlasElementBytes(a.type);
  const auto routine = static_cast<BlasLevel1>(a.routine);
  const bool device_mode = a.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  const OperandRange x = VectorRange(a.x, a.n, a.incx, elem);
  const OperandRange y = VectorRange(a.y, a.n, a.incy, elem);
  // The reductions and scal touch nothing for incx <= 0 (reference BLAS); a reduction's result
  // is written (0) in any case.
  const OperandRange x_positive = a.incx > 0 ? x : OperandRange{a.x, 0, false};
  auto result = [&](uint64_t bytes) {
    if (device_mode) ops.Write("result", {a.result, bytes, true}, /*overwritten=*/true);
  };
  switch (routine) {
    case BlasLevel1::kAxpy:
      if (a.n > 0) ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ops.Read("x", x);
      ops.Write("y", y, false);
      break;
    case BlasLevel1::kDot:
      ops.Read("x", x);
      ops.Read("y", y);
      result(elem);
      break;
    case BlasLevel1::kNrm2:
    case BlasLevel1::kAsum:
      ops.Read("x", x_positive);
      result(elem);
      break;
    case BlasLevel1::kIamax:
    case BlasLevel1::kIamin:
      ops.Read("x", x_positive);
      result(sizeof(int32_t));
      break;
    case BlasLevel1::kScal:
      if (a.n > 0 && a.incx > 0) ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ops.Write("x", x_positive, false);
      break;
    case BlasLevel1::kCopy:
      ops.Read("x", x);
      ops.Write("y", y, /*overwritten=*/true);
      break;
    case BlasLevel1::kSwap:
    case BlasLevel1::kRot:
      if (routine == BlasLevel1::kRot && a.n > 0) {
        ReadScalar(&ops, "c", a.pointer_mode, a.alpha, elem);
        ReadScalar(&ops, "s", a.pointer_mode, a.beta, elem);
      }
      ops.Write("x", x, false);
      ops.Write("y", y, false);
      break;
    case BlasLevel1::kCount:
      break;
  }
  return ops;
}

BlasOperands Level2Operands(const ipc::BlasLevel2Args& a) {
  BlasOperands ops;
  if (a.routine < 0 || a.routine >= static_cast<int32_t>(BlasLevel2::kCount)) ops.Refuse("Level 2 routine");
  if (!IsRealType(a.type)) ops.Refuse("data type (Level 2 serves float and double)");
  if (!IsPointerMode(a.pointer_mode)) ops.Refuse("pointer mode");
  if (!ops.ok()) return ops;
  const uint64_t elem = BlasElementBytes(a.type);
  const auto routine = static_cast<BlasLevel2>(a.routine);
  const bool general = routine == BlasLevel2::kGemv || routine == BlasLevel2::kGer;
  const bool triangular = routine == BlasLevel2::kTrsv || routine == BlasLevel2::kTrmv;
  const int32_t rows = general ? a.m : a.n;
  if (rows < 0 || a.n < 0) ops.Refuse("negative dimension");
  if (a.lda < std::max(1, rows)) ops.Refuse("lda below the rows of A");
  if (a.incx == 0 || (!triangular && a.incy == 0)) ops.Refuse("increment 0");
  if ((routine == BlasLevel2::kGemv || triangular) && !IsOperation(a.trans)) ops.Refuse("operation");
  if (!general && !IsTriangle(a.uplo)) ops.Refuse("fill mode");
  if (triangular && !IsDiagonal(a.diag)) ops.Refuse("diagonal type");
  if (!ops.ok() || rows == 0 || a.n == 0) return ops;  // cuBLAS returns at once
  const OperandRange matrix = MatrixRange(a.a, rows, a.n, a.lda, elem);
  switch (routine) {
    case BlasLevel2::kGemv:
    case BlasLevel2::kSymv: {
      const bool t = routine == BlasLevel2::kGemv && a.trans != CUBLAS_OP_N;
      ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ReadScalar(&ops, "beta", a.pointer_mode, a.beta, elem);
      ops.Read("A", matrix);
      ops.Read("x", VectorRange(a.x, t ? a.m : a.n, a.incx, elem));
      ops.Write("y", VectorRange(a.y, t ? a.n : rows, a.incy, elem),
                BetaZero(a.pointer_mode, a.beta, a.type));
      break;
    }
    case BlasLevel2::kGer:
      ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ops.Read("x", VectorRange(a.x, a.m, a.incx, elem));
      ops.Read("y", VectorRange(a.y, a.n, a.incy, elem));
      ops.Write("A", matrix, false);
      break;
    case BlasLevel2::kTrsv:
    case BlasLevel2::kTrmv:
      ops.Read("A", matrix);
      ops.Write("x", VectorRange(a.x, a.n, a.incx, elem), false);
      break;
    case BlasLevel2::kCount:
      break;
  }
  return ops;
}

BlasOperands Level3Operands(const ipc::BlasLevel3Args& a) {
  BlasOperands ops;
  if (a.routine < 0 || a.routine >= static_cast<int32_t>(BlasLevel3::kCount)) ops.Refuse("Level 3 routine");
  if (!IsRealType(a.type)) ops.Refuse("data type (trsm, syrk, geam and dgmm serve float and double)");
  if (!IsPointerMode(a.pointer_mode)) ops.Refuse("pointer mode");
  if (!ops.ok()) return ops;
  const uint64_t elem = BlasElementBytes(a.type);
  const auto routine = static_cast<BlasLevel3>(a.routine);
  const bool ta = a.trans_a != CUBLAS_OP_N, tb = a.trans_b != CUBLAS_OP_N;
  if (a.m < 0 || a.n < 0 || a.k < 0) ops.Refuse("negative dimension");
  switch (routine) {
    case BlasLevel3::kTrsm: {
      // B = alpha op(A)^-1 B (left) or alpha B op(A)^-1 (right), B m x n, A square.
      const int32_t ka = a.side == CUBLAS_SIDE_LEFT ? a.m : a.n;
      if (!IsSide(a.side) || !IsTriangle(a.uplo) || !IsOperation(a.trans_a) || !IsDiagonal(a.diag))
        ops.Refuse("enumeration");
      if (a.lda < std::max(1, ka) || a.ldb < std::max(1, a.m)) ops.Refuse("leading dimension below the rows");
      if (!ops.ok() || a.m == 0 || a.n == 0) return ops;
      ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ops.Read("A", MatrixRange(a.a, ka, ka, a.lda, elem));
      ops.Write("B", MatrixRange(a.b, a.m, a.n, a.ldb, elem), false);
      break;
    }
    case BlasLevel3::kSyrk: {
      // C = alpha op(A) op(A)^T + beta C on one triangle of the n x n C; op(A) n x k.
      if (!IsTriangle(a.uplo) || !IsOperation(a.trans_a)) ops.Refuse("enumeration");
      const int32_t rows_a = ta ? a.k : a.n;
      if (a.lda < std::max(1, rows_a) || a.ldc < std::max(1, a.n))
        ops.Refuse("leading dimension below the rows");
      if (!ops.ok() || a.n == 0) return ops;
      ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ReadScalar(&ops, "beta", a.pointer_mode, a.beta, elem);
      if (a.k > 0) ops.Read("A", MatrixRange(a.a, rows_a, ta ? a.n : a.k, a.lda, elem));
      // One triangle only: the other's bytes keep what they held.
      ops.Write("C", MatrixRange(a.c, a.n, a.n, a.ldc, elem), false);
      break;
    }
    case BlasLevel3::kGeam: {
      // C = alpha op(A) + beta op(B), all m x n.
      if (!IsOperation(a.trans_a) || !IsOperation(a.trans_b)) ops.Refuse("operation");
      if (a.lda < std::max(1, ta ? a.n : a.m) || a.ldb < std::max(1, tb ? a.n : a.m) ||
          a.ldc < std::max(1, a.m)) {
        ops.Refuse("leading dimension below the rows");
      }
      if (!ops.ok() || a.m == 0 || a.n == 0) return ops;
      ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, elem);
      ReadScalar(&ops, "beta", a.pointer_mode, a.beta, elem);
      ops.Read("A", MatrixRange(a.a, ta ? a.n : a.m, ta ? a.m : a.n, a.lda, elem));
      ops.Read("B", MatrixRange(a.b, tb ? a.n : a.m, tb ? a.m : a.n, a.ldb, elem));
      ops.Write("C", MatrixRange(a.c, a.m, a.n, a.ldc, elem), /*overwritten=*/true);
      break;
    }
    case BlasLevel3::kDgmm: {
      // C = A diag(x) (right) or diag(x) A (left), m x n; `b` is x.
      if (!IsSide(a.side)) ops.Refuse("side");
      if (a.lda < std::max(1, a.m) || a.ldc < std::max(1, a.m))
        ops.Refuse("leading dimension below the rows");
      if (!ops.ok() || a.m == 0 || a.n == 0) return ops;
      ops.Read("A", MatrixRange(a.a, a.m, a.n, a.lda, elem));
      ops.Read("x", VectorRange(a.b, a.side == CUBLAS_SIDE_LEFT ? a.m : a.n, a.incx, elem));
      ops.Write("C", MatrixRange(a.c, a.m, a.n, a.ldc, elem), /*overwritten=*/true);
      break;
    }
    case BlasLevel3::kCount:
      break;
  }
  return ops;
}

BlasOperands GemmOperands(const ipc::GemmArgs& a) {
  BlasOperands ops;
  const int32_t scalar_type = GemmScalarType(a.a_type, a.b_type, a.c_type, a.compute_type);
  if (scalar_type < 0) ops.Refuse("combination of matrix and compute types");
  if (!IsOperation(a.trans_a) || !IsOperation(a.trans_b)) ops.Refuse("operation");
  if (!IsGemmAlgo(a.algo)) ops.Refuse("GEMM algorithm");
  if (!IsPointerMode(a.pointer_mode)) ops.Refuse("pointer mode");
  const auto kind = static_cast<ipc::BlasBatch>(a.batch_kind);
  if (kind != ipc::BlasBatch::kNone && kind != ipc::BlasBatch::kStrided &&
      kind != ipc::BlasBatch::kPointers) {
    ops.Refuse("batch kind");
  }
  if (a.batch < 0) ops.Refuse("negative batch count");
  if (kind == ipc::BlasBatch::kPointers && a.batch > ipc::kMaxBlasPointerBatch)
    ops.Refuse("batch over phos's cap");
  if (a.m < 0 || a.n < 0 || a.k < 0) ops.Refuse("negative dimension");
  const bool ta = a.trans_a != CUBLAS_OP_N, tb = a.trans_b != CUBLAS_OP_N;
  const int32_t rows_a = ta ? a.k : a.m, rows_b = tb ? a.n : a.k;
  if (a.lda < std::max(1, rows_a) || a.ldb < std::max(1, rows_b) || a.ldc < std::max(1, a.m)) {
    ops.Refuse("leading dimension below the rows");
  }
  const int64_t batch = kind == ipc::BlasBatch::kNone ? 1 : a.batch;
  if (!ops.ok() || a.m == 0 || a.n == 0 || batch == 0) return ops;  // cuBLAS returns at once
  const uint64_t scalar = BlasElementBytes(scalar_type);
  ReadScalar(&ops, "alpha", a.pointer_mode, a.alpha, scalar);
  ReadScalar(&ops, "beta", a.pointer_mode, a.beta, scalar);
  if (kind == ipc::BlasBatch::kPointers) {
    // k == 0 reads neither A nor B (C = beta C).
    if (a.k > 0) {
      ops.Read("pointers to A", VectorRange(a.a, batch, 1, sizeof(uint64_t)));
      ops.Read("pointers to B", VectorRange(a.b, batch, 1, sizeof(uint64_t)));
    }
    ops.Read("pointers to C", VectorRange(a.c, batch, 1, sizeof(uint64_t)));
    return ops;
  }
  const int64_t stride_a = kind == ipc::BlasBatch::kStrided ? a.stride_a : 0;
  const int64_t stride_b = kind == ipc::BlasBatch::kStrided ? a.stride_b : 0;
  const int64_t stride_c = kind == ipc::BlasBatch::kStrided ? a.stride_c : 0;
  if (a.k > 0) {
    ops.Read("A",
             MatrixRange(a.a, rows_a, ta ? a.m : a.k, a.lda, BlasElementBytes(a.a_type), batch, stride_a));
    ops.Read("B",
             MatrixRange(a.b, rows_b, tb ? a.k : a.n, a.ldb, BlasElementBytes(a.b_type), batch, stride_b));
  }
  ops.Write("C", MatrixRange(a.c, a.m, a.n, a.ldc, BlasElementBytes(a.c_type), batch, stride_c),
            BetaZero(a.pointer_mode, a.beta, scalar_type));
  return ops;
}

BlasOperands GemmEntryOperands(const ipc::GemmArgs& a, uint64_t a_ptr, uint64_t b_ptr, uint64_t c_ptr) {
  BlasOperands ops;
  const int32_t scalar_type = GemmScalarType(a.a_type, a.b_type, a.c_type, a.compute_type);
  const bool ta = a.trans_a != CUBLAS_OP_N, tb = a.trans_b != CUBLAS_OP_N;
  if (a.m <= 0 || a.n <= 0) return ops;
  if (a.k > 0) {
    ops.Read("A", MatrixRange(a_ptr, ta ? a.k : a.m, ta ? a.m : a.k, a.lda, BlasElementBytes(a.a_type)));
    ops.Read("B", MatrixRange(b_ptr, tb ? a.n : a.k, tb ? a.k : a.n, a.ldb, BlasElementBytes(a.b_type)));
  }
  ops.Write("C", MatrixRange(c_ptr, a.m, a.n, a.ldc, BlasElementBytes(a.c_type)),
            BetaZero(a.pointer_mode, a.beta, scalar_type));
  return ops;
}

namespace {

bool LtServedEpilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}

// The bytes a cuBLASLt layout names at `ptr`: a row-major rows x cols matrix is a column-major
// cols x rows one. Refuses (on `ops`) an order or leading dimension cuBLASLt does not take.
OperandRange LtMatrixRange(const ipc::BlasLtLayout& l, uint64_t ptr, BlasOperands* ops) {
  const bool row = l.order == CUBLASLT_ORDER_ROW;
  if (l.order != CUBLASLT_ORDER_COL && !row) ops->Refuse("matrix order (column or row)");
  if (l.rows > INT32_MAX || l.cols > INT32_MAX) ops->Refuse("matrix dimension beyond int32");
  if (l.batch_count < 1 || l.batch_stride < 0) ops->Refuse("batch count or stride");
  const auto rows = static_cast<int64_t>(row ? l.cols : l.rows), cols = static_cast<int64_t>(row ? l.rows : l.cols);
  if (l.ld < std::max<int64_t>(1, rows)) ops->Refuse("leading dimension below the rows (columns, row-major)");
  if (!ops->ok()) return {ptr, 0, false};
  return MatrixRange(ptr, rows, cols, l.ld, BlasElementBytes(l.type), l.batch_count, l.batch_stride);
}

}  // namespace

BlasOperands LtMatmulOperands(const ipc::BlasLtMatmulArgs& a) {
  BlasOperands ops;
  const ipc::BlasLtLayout &la = a.layout_a, &lb = a.layout_b, &lc = a.layout_c, &ld = a.layout_d;
  const bool input_16 = la.type == CUDA_R_16F || la.type == CUDA_R_16BF;
  if (la.type != lb.type || (la.type != CUDA_R_32F && !input_16)) ops.Refuse("A and B types");
  if (lc.type != ld.type || (ld.type != CUDA_R_32F && ld.type != la.type)) ops.Refuse("C and D types");
  if (!Fp32Compute(a.compute_type) || a.scale_type != CUDA_R_32F) ops.Refuse("compute or scale type");
  if (!IsOperation(a.trans_a) || !IsOperation(a.trans_b)) ops.Refuse("operation");
  if (!LtServedEpilogue(a.epilogue)) ops.Refuse("epilogue");
  const bool bias = (a.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  const int32_t bias_type = a.bias_type == -1 ? ld.type : a.bias_type;
  if (bias && ((bias_type != ld.type && bias_type != CUDA_R_32F) || a.bias == 0)) ops.Refuse("bias vector");
  if (la.batch_count != lb.batch_count || la.batch_count != lc.batch_count || la.batch_count != ld.batch_count)
    ops.Refuse("batch counts differ");
  if (!ops.ok()) return ops;
  // op(A) is m x k, op(B) k x n, C and D m x n.
  const bool ta = a.trans_a != CUBLAS_OP_N, tb = a.trans_b != CUBLAS_OP_N;
  const uint64_t m = ta ? la.cols : la.rows, k = ta ? la.rows : la.cols;
  const uint64_t kb = tb ? lb.cols : lb.rows, n = tb ? lb.rows : lb.cols;
  if (k != kb || lc.rows != m || lc.cols != n || ld.rows != m || ld.cols != n) ops.Refuse("matrix shapes");
  const OperandRange ra = LtMatrixRange(la, a.a, &ops), rb = LtMatrixRange(lb, a.b, &ops);
  const OperandRange rc = LtMatrixRange(lc, a.c, &ops), rd = LtMatrixRange(ld, a.d, &ops);
  if (!ops.ok() || m == 0 || n == 0) return ops;
  // phos's rule, on simgpu and a GPU alike: cuBLASLt does not document a matmul of empty A and B.
  if (k == 0) ops.Refuse("an inner dimension of 0");
  ops.Read("A", ra);
  ops.Read("B", rb);
  if (!BlasScalarIsZero(a.beta, CUDA_R_32F)) ops.Read("C", rc);
  if (bias) ops.Read("bias", VectorRange(a.bias, static_cast<int64_t>(m), 1, BlasElementBytes(bias_type)));
  ops.Write("D", rd, /*overwritten=*/true);
  if (a.workspace_bytes > 0) {
    const bool wraps = a.workspace + a.workspace_bytes < a.workspace;
    ops.Write("workspace", wraps ? Unbounded(a.workspace) : OperandRange{a.workspace, a.workspace_bytes, true},
              /*overwritten=*/true);
  }
  return ops;
}

}  // namespace phos::runtime
