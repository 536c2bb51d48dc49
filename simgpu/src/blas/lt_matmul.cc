// cublasLtMatmul on simgpu: D = epilogue(alpha op(A) op(B) + beta C + bias) for each matrix of a
// strided batch. op(A) and the columns of op(B) a block range needs are packed into fp32 (whatever
// their type, order or transposition), multiplied by OpenBLAS's sgemm, and the epilogue applied
// element by element in fp32 before D is narrowed to its type once.
#include <algorithm>
#include <cmath>
#include <vector>

#include "blas/blas_internal.h"
#include "blas/half.h"
#include "blas/lt.h"

namespace phos::sim::blas {
namespace {

uint64_t ElementBytes(uint32_t type) {
  return type == CUDA_R_32F ? 4 : 2;
}

// One matrix of a batch entry as its layout stores it: element (i, j) of the rows x cols matrix.
struct Stored {
  const char* base;
  uint32_t type;
  bool row_major;
  int64_t ld;

  int64_t Index(int64_t i, int64_t j) const { return row_major ? i * ld + j : j * ld + i; }
  float At(int64_t i, int64_t j) const { return Widen1(base, Index(i, j), type); }
  void Put(int64_t i, int64_t j, float v) const { Narrow1(v, const_cast<char*>(base), Index(i, j), type); }
};

Stored Entry(const void* base, const LtLayout& l, int64_t e) {
  // e * stride first: the operand's check bounded it for every entry (AddBatch), whatever the
  // stride of a batch of one.
  const int64_t offset = e * l.batch_stride * static_cast<int64_t>(ElementBytes(l.type));
  return {static_cast<const char*>(base) + offset, l.type, l.order == CUBLASLT_ORDER_ROW, l.ld};
}

// cuBLASLt's GELU: the tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
float Gelu(float x) {
  constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrtTwoOverPi * (x + 0.044715f * x * x * x)));
}

struct Shape {
  int64_t m, n, k;
};

bool IsInputType(uint32_t t) {
  return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

bool Fp32Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

bool LayoutValid(const LtLayout& l) {
  const uint64_t rows = l.order == CUBLASLT_ORDER_ROW ? l.cols : l.rows;
  return l.rows <= INT32_MAX && l.cols <= INT32_MAX && l.batch_count >= 1 && l.batch_stride >= 0 &&
         l.ld >= std::max<int64_t>(1, static_cast<int64_t>(rows));
}

Shape ShapeOf(const LtMatmulDesc& d, const LtLayout& a, const LtLayout& b) {
  const bool ta = d.trans_a != CUBLAS_OP_N, tb = d.trans_b != CUBLAS_OP_N;
  return {static_cast<int64_t>(ta ? a.cols : a.rows), static_cast<int64_t>(tb ? b.rows : b.cols),
          static_cast<int64_t>(ta ? a.rows : a.cols)};
}

// C[:, j0:j1) of one entry, alpha applied: op(A) and those columns of op(B) packed, then sgemm.
void Product(const LtMatmulCall& c, const Shape& s, float alpha, int64_t e, int64_t j0, int64_t j1,
             std::vector<float>* out) {
  const Stored a = Entry(c.pa, c.a, e), b = Entry(c.pb, c.b, e);
  const bool ta = c.desc.trans_a != CUBLAS_OP_N, tb = c.desc.trans_b != CUBLAS_OP_N;
  const int64_t cols = j1 - j0;
  std::vector<float> pa(static_cast<size_t>(s.m * s.k)), pb(static_cast<size_t>(s.k * cols));
  for (int64_t p = 0; p < s.k; ++p) {
    for (int64_t i = 0; i < s.m; ++i) pa[static_cast<size_t>(p * s.m + i)] = ta ? a.At(p, i) : a.At(i, p);
  }
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t p = 0; p < s.k; ++p) pb[static_cast<size_t>(j * s.k + p)] = tb ? b.At(j0 + j, p) : b.At(p, j0 + j);
  }
  out->assign(static_cast<size_t>(s.m * cols), 0.0f);
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m), static_cast<int>(cols),
              static_cast<int>(s.k), alpha, pa.data(), static_cast<int>(s.m), pb.data(), static_cast<int>(s.k), 0.0f,
              out->data(), static_cast<int>(s.m));
}

}  // namespace

cublasStatus_t CheckLtProblem(const LtMatmulDesc& d, const LtLayout& a, const LtLayout& b, const LtLayout& c,
                              const LtLayout& out) {
  if (!LayoutValid(a) || !LayoutValid(b) || !LayoutValid(c) || !LayoutValid(out)) return CUBLAS_STATUS_INVALID_VALUE;
  if (a.batch_count != b.batch_count || a.batch_count != c.batch_count || a.batch_count != out.batch_count)
    return CUBLAS_STATUS_INVALID_VALUE;
  const Shape s = ShapeOf(d, a, b);
  const auto kb = static_cast<int64_t>(d.trans_b != CUBLAS_OP_N ? b.cols : b.rows);
  if (s.k != kb || c.rows != static_cast<uint64_t>(s.m) || c.cols != static_cast<uint64_t>(s.n) || c.rows != out.rows ||
      c.cols != out.cols) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (a.type != b.type || !IsInputType(a.type) || c.type != out.type || (out.type != CUDA_R_32F && out.type != a.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!Fp32Compute(d.compute_type) || d.scale_type != CUDA_R_32F || d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((d.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0) {
    if (d.bias == 0) return CUBLAS_STATUS_INVALID_VALUE;
    const int64_t bias_type = d.bias_type == -1 ? out.type : d.bias_type;
    if (bias_type != out.type && bias_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (s.k == 0 && s.m > 0 && s.n > 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t EnqueueLtMatmul(const BlasTarget& target, const LtMatmulCall& call) {
  if (cublasStatus_t s = CheckLtProblem(call.desc, call.a, call.b, call.c, call.d); s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (call.alpha == nullptr || call.beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (call.workspace_bytes > 0 && call.workspace == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  float alpha = 0.0f, beta = 0.0f;
  std::memcpy(&alpha, call.alpha, sizeof(alpha));
  std::memcpy(&beta, call.beta, sizeof(beta));
  const Shape s = ShapeOf(call.desc, call.a, call.b);
  if (s.m == 0 || s.n == 0) return CUBLAS_STATUS_SUCCESS;
  const bool reads_c = beta != 0.0f;
  const bool bias = (call.desc.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  const uint32_t bias_type = call.desc.bias_type == -1 ? call.d.type : static_cast<uint32_t>(call.desc.bias_type);
  auto ranges = std::make_shared<OperandRanges>();
  auto add = [&](const char* what, const void* base, const LtLayout& l, Access access) {
    const bool row = l.order == CUBLASLT_ORDER_ROW;
    return ranges->AddBatch(what, base, l.batch_count, l.batch_stride, static_cast<int64_t>(row ? l.cols : l.rows),
                            static_cast<int64_t>(row ? l.rows : l.cols), l.ld, ElementBytes(l.type), access);
  };
  bool ok = add("A", call.pa, call.a, Access::kRead) && add("B", call.pb, call.b, Access::kRead) &&
            (!reads_c || add("C", call.pc, call.c, Access::kRead)) && add("D", call.pd, call.d, Access::kReadWrite);
  if (bias) ok = ok && ranges->AddVector("bias", reinterpret_cast<const void*>(call.desc.bias), s.m, 1,
                                         ElementBytes(bias_type), Access::kRead);
  if (call.workspace_bytes > 0)
    ok = ok && ranges->AddVector("workspace", call.workspace, 1, 1, call.workspace_bytes, Access::kReadWrite);
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;

  const uint64_t blocks = static_cast<uint64_t>(s.n) * static_cast<uint64_t>(call.d.batch_count);
  const uint64_t bytes = static_cast<uint64_t>(s.m * s.n) * ElementBytes(call.d.type) *
                         static_cast<uint64_t>(call.d.batch_count);
  return EnqueueBlasOp(target, "cublasLtMatmul", std::move(ranges), blocks, bytes,
                       [call, s, alpha, beta, reads_c, bias, bias_type](uint64_t first, uint64_t end) {
                         std::vector<float> product;
                         const uint32_t epilogue = call.desc.epilogue;
                         const Stored bias_vector{reinterpret_cast<const char*>(call.desc.bias), bias_type, false,
                                                  std::max<int64_t>(1, s.m)};
                         for (auto e = static_cast<int64_t>(first) / s.n; e * s.n < static_cast<int64_t>(end); ++e) {
                           const int64_t j0 = std::max<int64_t>(static_cast<int64_t>(first), e * s.n) - e * s.n;
                           const int64_t j1 = std::min<int64_t>(static_cast<int64_t>(end), (e + 1) * s.n) - e * s.n;
                           Product(call, s, alpha, e, j0, j1, &product);
                           const Stored d = Entry(call.pd, call.d, e);
                           const Stored c = reads_c ? Entry(call.pc, call.c, e) : d;
                           for (int64_t j = j0; j < j1; ++j) {
                             for (int64_t i = 0; i < s.m; ++i) {
                               float v = product[static_cast<size_t>((j - j0) * s.m + i)];
                               if (reads_c) v += beta * c.At(i, j);
                               if (bias) v += bias_vector.At(i, 0);
                               if ((epilogue & CUBLASLT_EPILOGUE_RELU) != 0) v = std::max(v, 0.0f);
                               if ((epilogue & CUBLASLT_EPILOGUE_GELU) != 0) v = Gelu(v);
                               d.Put(i, j, v);
                             }
                           }
                         }
                       });
}

}  // namespace phos::sim::blas
