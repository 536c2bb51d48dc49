// cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic. The matmul is one asynchronous record
// (kBlasLtMatmul) carrying its descriptor's settings, the four layouts and every pointer it names;
// phosd checks all of it again and runs it on the stream (its failures surface at the next
// synchronising CUDA call, as a kernel's do). The heuristic is answered here: one algorithm, phos's,
// needing no workspace, for a problem phos serves.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>

#include "cublaslt_internal.h"
#include "phos/frontend/remote_call.h"
#include "phos/ipc/wire.h"

namespace phos::frontend::blaslt {
namespace {

// Marks the one algorithm the heuristic answers, in its first word.
constexpr uint64_t kPhosAlgo = 0x70686f73;  // "phos"

bool Fp32Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

bool InputType(uint32_t t) {
  return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

// A layout cuBLASLt takes: dimensions within int32, a leading dimension at least the rows (the
// columns, row-major), a batch of at least one with a stride that is not negative.
bool Takes(const Layout& l) {
  const uint64_t rows = l.order == CUBLASLT_ORDER_ROW ? l.cols : l.rows;
  return l.rows <= INT32_MAX && l.cols <= INT32_MAX && l.batch_count >= 1 && l.batch_stride >= 0 &&
         l.ld >= std::max<int64_t>(1, static_cast<int64_t>(rows));
}

ipc::BlasLtLayout Wire(const Layout& l) {
  return {static_cast<int32_t>(l.type), l.order, l.rows, l.cols, l.ld, l.batch_stride, l.batch_count, 0};
}

}  // namespace

cublasStatus_t CheckProblem(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c,
                            const Layout& d) {
  if (!Takes(a) || !Takes(b) || !Takes(c) || !Takes(d)) return CUBLAS_STATUS_INVALID_VALUE;
  if (a.batch_count != b.batch_count || a.batch_count != c.batch_count || a.batch_count != d.batch_count)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = desc.trans_a != CUBLAS_OP_N, tb = desc.trans_b != CUBLAS_OP_N;
  const uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const uint64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n || d.rows != m || d.cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias = (desc.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  if (bias && desc.bias == 0) return CUBLAS_STATUS_INVALID_VALUE;
  const char* why = nullptr;
  if (a.type != b.type || !InputType(a.type) || c.type != d.type || (d.type != CUDA_R_32F && d.type != a.type) ||
      !Fp32Compute(desc.compute_type) || desc.scale_type != CUDA_R_32F) {
    why = "types other than fp32, fp16 or bf16 A and B computing in fp32 into C and D of their type or fp32";
  } else if (bias && desc.bias_type != -1 && static_cast<uint32_t>(desc.bias_type) != d.type &&
             desc.bias_type != CUDA_R_32F) {
    why = "a bias of a type other than D's or fp32";
  } else if (k == 0 && m > 0 && n > 0) {
    why = "an inner dimension of 0";
  }
  return why == nullptr ? CUBLAS_STATUS_SUCCESS : NotSupported("cublasLtMatmul", why);
}

}  // namespace phos::frontend::blaslt

using namespace phos::frontend::blaslt;
namespace ipc = phos::ipc;

extern "C" {

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t adesc, cublasLtMatrixLayout_t bdesc,
                                              cublasLtMatrixLayout_t cdesc, cublasLtMatrixLayout_t ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!KnownHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  MatmulDesc d;
  Layout a, b, c, out;
  Preference p;
  if (!FindDesc(desc, &d) || !FindLayout(adesc, &a) || !FindLayout(bdesc, &b) || !FindLayout(cdesc, &c) ||
      !FindLayout(ddesc, &out) || !FindPreference(pref, &p) || requested <= 0 || results == nullptr ||
      returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  if (cublasStatus_t s = CheckProblem(d, a, b, c, out); s != CUBLAS_STATUS_SUCCESS) {
    return s == CUBLAS_STATUS_INVALID_VALUE ? s : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kPhosAlgo;
  results[0].workspaceSize = 0;  // within any preference's maximum
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// `algo` is not looked at: phos has one algorithm on simgpu, and on a GPU phosd lets NVIDIA's
// library choose for the workspace given.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t*, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!KnownHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  MatmulDesc d;
  Layout a, b, c, out;
  if (!FindDesc(desc, &d) || !FindLayout(adesc, &a) || !FindLayout(bdesc, &b) || !FindLayout(cdesc, &c) ||
      !FindLayout(ddesc, &out) || alpha == nullptr || beta == nullptr || (workspace_bytes > 0 && workspace == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (cublasStatus_t s = CheckProblem(d, a, b, c, out); s != CUBLAS_STATUS_SUCCESS) return s;
  ipc::BlasLtMatmulArgs args{};
  if (__phosStreamId(stream, &args.stream) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  args.compute_type = d.compute_type;
  args.scale_type = d.scale_type;
  args.trans_a = d.trans_a;
  args.trans_b = d.trans_b;
  args.epilogue = d.epilogue;
  args.bias_type = d.bias_type;
  args.a = reinterpret_cast<uintptr_t>(A);
  args.b = reinterpret_cast<uintptr_t>(B);
  args.c = reinterpret_cast<uintptr_t>(C);
  args.d = reinterpret_cast<uintptr_t>(D);
  args.bias = (d.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0 ? d.bias : 0;
  args.workspace = reinterpret_cast<uintptr_t>(workspace);
  args.workspace_bytes = workspace_bytes;
  std::memcpy(args.alpha.bytes, alpha, sizeof(float));  // the scale type, fp32 (CheckProblem)
  std::memcpy(args.beta.bytes, beta, sizeof(float));
  args.layout_a = Wire(a);
  args.layout_b = Wire(b);
  args.layout_c = Wire(c);
  args.layout_d = Wire(out);
  const int queued = __phosRemoteCall(static_cast<uint16_t>(ipc::Op::kBlasLtMatmul), &args, sizeof(args), 0, nullptr, 0);
  return queued == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
