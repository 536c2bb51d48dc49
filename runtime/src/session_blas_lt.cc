// cublasLtMatmul on phosd's side. The function's descriptors, layouts and preferences live in its
// frontend; the record carries what they say and every pointer the call names, all checked against
// the session's buffers (LtMatmulOperands) before the library sees one. phosd then runs the call on
// a cuBLASLt handle of its own in the record's device context, through descriptors it makes from
// the record for the call and destroys after it (cuBLASLt reads them when the call is made).
#include <array>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/runtime/blas_operands.h"
#include "session.h"

namespace phos::runtime {
namespace {

// The driver's descriptor and four layouts of one call, destroyed when it has been made.
class LtDescriptors {
 public:
  explicit LtDescriptors(const driver::DriverTable& d) : d_(d) {}
  ~LtDescriptors() {
    for (cublasLtMatrixLayout_t l : layouts_) {
      if (l != nullptr) d_.cublasLtMatrixLayoutDestroy(l);
    }
    if (desc_ != nullptr) d_.cublasLtMatmulDescDestroy(desc_);
  }
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;

  // C's layout is D's when beta is 0 (`c_is_d`): cuBLASLt then reads no C, and phosd checked none.
  cublasStatus_t Build(const ipc::BlasLtMatmulArgs& a, bool c_is_d) {
    cublasStatus_t s = d_.cublasLtMatmulDescCreate(&desc_, static_cast<cublasComputeType_t>(a.compute_type),
                                                   static_cast<cudaDataType>(a.scale_type));
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
      if (s == CUBLAS_STATUS_SUCCESS) s = d_.cublasLtMatmulDescSetAttribute(desc_, attr, &value, sizeof(value));
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, a.trans_a);
    set(CUBLASLT_MATMUL_DESC_TRANSB, a.trans_b);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, a.epilogue);
    if ((a.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0) {
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bias);
      if (a.bias_type != -1) set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, a.bias_type);
    }
    const std::array<const ipc::BlasLtLayout*, 4> layouts = {&a.layout_a, &a.layout_b,
                                                             c_is_d ? &a.layout_d : &a.layout_c, &a.layout_d};
    for (size_t i = 0; i < layouts.size() && s == CUBLAS_STATUS_SUCCESS; ++i) s = Layout(*layouts[i], &layouts_[i]);
    return s;
  }

  cublasLtMatmulDesc_t desc() const { return desc_; }
  cublasLtMatrixLayout_t layout(size_t i) const { return layouts_[i]; }

 private:
  cublasStatus_t Layout(const ipc::BlasLtLayout& l, cublasLtMatrixLayout_t* out) {
    cublasStatus_t s =
        d_.cublasLtMatrixLayoutCreate(out, static_cast<cudaDataType>(l.type), l.rows, l.cols, l.ld);
    const auto set = [&](cublasLtMatrixLayoutAttribute_t attr, const auto& value) {
      if (s == CUBLAS_STATUS_SUCCESS) s = d_.cublasLtMatrixLayoutSetAttribute(*out, attr, &value, sizeof(value));
    };
    set(CUBLASLT_MATRIX_LAYOUT_ORDER, l.order);
    set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, l.batch_count);
    set(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, l.batch_stride);
    return s;
  }

  const driver::DriverTable& d_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  std::array<cublasLtMatrixLayout_t, 4> layouts_{};
};

}  // namespace

Result<cublasLtHandle_t> Session::BlasLtHandle() {
  auto it = blas_lt_.find(route_device_);
  if (it != blas_lt_.end()) return it->second.handle;
  PHOS_ASSIGN_OR_RETURN(CUcontext ctx, ContextOn(route_device_));
  cublasLtHandle_t handle = nullptr;
  if (cublasStatus_t s = driver_->cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
    return Status::Internal(fmt::format("cublasLtCreate: status {}", static_cast<int>(s)));
  }
  blas_lt_[route_device_] = BlasLtContextHandle{ctx, handle};
  return handle;
}

void Session::ReleaseBlasLt() {
  for (auto& [device, h] : blas_lt_) {
    driver::ContextScope scope(*driver_, h.context);
    if (!scope.ok()) continue;  // a context already gone took the handle's resources with it
    driver_->cuCtxSynchronize();
    driver_->cublasLtDestroy(h.handle);
  }
  blas_lt_.clear();
}

// Asynchronous: a refusal or failure is the session's sticky error (the frontend refused what
// cuBLASLt refuses at once).
CUresult Session::BlasLtMatmul(const ipc::BlasLtMatmulArgs& a, const Call& call) {
  const BlasOperands ops = LtMatmulOperands(a);
  if (CUresult r = CheckBlasOperands(ops, call); r != CUDA_SUCCESS) return r;
  // Nothing to compute (m or n is 0): cuBLASLt would touch no memory; neither does phosd.
  if (a.layout_d.rows == 0 || a.layout_d.cols == 0) return CUDA_SUCCESS;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  Result<cublasLtHandle_t> handle = BlasLtHandle();
  if (!handle.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: {}", pid_, call.name, handle.status().message());
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  const bool beta_zero = BlasScalarIsZero(a.beta, CUDA_R_32F);
  LtDescriptors descriptors(*driver_);
  if (cublasStatus_t s = descriptors.Build(a, beta_zero); s != CUBLAS_STATUS_SUCCESS) return BlasFailure(s);
  const auto ptr = [](uint64_t p) { return reinterpret_cast<void*>(p); };
  // No algorithm: the library's own heuristic picks one for this workspace (the frontend's answer
  // to cublasLtMatmulAlgoGetHeuristic names phos's, which NVIDIA's library does not know).
  return BlasFailure(driver_->cublasLtMatmul(
      *handle, descriptors.desc(), a.alpha.bytes, ptr(a.a), descriptors.layout(0), ptr(a.b), descriptors.layout(1),
      a.beta.bytes, ptr(beta_zero ? a.d : a.c), descriptors.layout(2), ptr(a.d), descriptors.layout(3), nullptr,
      a.workspace_bytes > 0 ? ptr(a.workspace) : nullptr, a.workspace_bytes, reinterpret_cast<cudaStream_t>(*stream)));
}

}  // namespace phos::runtime
