// batched_gemm_fn: a function whose one cuBLAS call, a batched GEMM, reads matrices that only device
// arrays of pointers name, for checking that a restore's speculation reads those arrays and loads
// every matrix before the call runs (docs/design.md D8, docs/remoting.md "cuBLAS").
//
// Initialisation (before the pre-entry point): B matrices A_i of N x N floats, each in its own
// buffer, A_i holding i + 1 everywhere; a vector x of N ones; an output buffer of B vectors of N;
// and the three pointer arrays (A_i, x for every entry, the i-th output vector) in one buffer.
// Any request runs cublasSgemmBatched (y_i = A_i x) and answers "y_0 y_1 ... y_(B-1)": the first
// element of each y_i, as %.1f, which is (i + 1) * N.
//
//   batched_gemm_fn [--matrices B] [--size N]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;

class BatchedGemmFn {
 public:
  BatchedGemmFn(int matrices, int size) : matrices_(matrices), size_(size) {}

  Status Init() {
    PHOS_FN_RETURN_IF_BLAS(cublasCreate(&handle_));
    const size_t n = static_cast<size_t>(size_);
    std::vector<const float*> a_entries, x_entries;
    std::vector<float*> y_entries;
    for (int i = 0; i < matrices_; ++i) {
      float* a = nullptr;
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(&a, n * n * sizeof(float)));
      const std::vector<float> values(n * n, static_cast<float>(i + 1));
      PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(a, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
      a_entries.push_back(a);
    }
    float* x = nullptr;
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(&x, n * sizeof(float)));
    const std::vector<float> ones(n, 1.0f);
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(&y_, n * matrices_ * sizeof(float)));
    for (int i = 0; i < matrices_; ++i) {
      x_entries.push_back(x);
      y_entries.push_back(y_ + static_cast<size_t>(i) * n);
    }
    const size_t array_bytes = matrices_ * sizeof(void*);
    char* arrays = nullptr;
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(&arrays, 3 * array_bytes));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(arrays, a_entries.data(), array_bytes, cudaMemcpyHostToDevice));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(arrays + array_bytes, x_entries.data(), array_bytes, cudaMemcpyHostToDevice));
    PHOS_FN_RETURN_IF_CUDA(
        cudaMemcpy(arrays + 2 * array_bytes, y_entries.data(), array_bytes, cudaMemcpyHostToDevice));
    a_array_ = reinterpret_cast<const float* const*>(arrays);
    x_array_ = reinterpret_cast<const float* const*>(arrays + array_bytes);
    y_array_ = reinterpret_cast<float* const*>(arrays + 2 * array_bytes);
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view) {
    const float one = 1.0f, zero = 0.0f;
    PHOS_FN_RETURN_IF_BLAS(cublasSgemmBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, size_, 1, size_, &one, a_array_,
                                      size_, x_array_, size_, &zero, y_array_, size_, matrices_));
    std::vector<float> y(static_cast<size_t>(size_) * matrices_);
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(y.data(), y_, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::string answer;
    for (int i = 0; i < matrices_; ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.1f", i == 0 ? "" : " ",
                    static_cast<double>(y[static_cast<size_t>(i) * size_]));
      answer += buf;
    }
    return answer;
  }

 private:
  int matrices_;
  int size_;
  cublasHandle_t handle_ = nullptr;
  float* y_ = nullptr;
  const float* const* a_array_ = nullptr;
  const float* const* x_array_ = nullptr;
  float* const* y_array_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batched_gemm_fn: a batched GEMM over device arrays of pointers (a phos test function)"};
  int matrices = 16, size = 1024;
  app.add_option("--matrices", matrices, "Matrices in the batch")->check(CLI::Range(1, 64));
  app.add_option("--size", size, "Rows and columns of each matrix")->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);

  BatchedGemmFn fn(matrices, size);
  if (Status s = fn.Init(); !s.ok()) {
    PHOS_LOG(Error, "batched_gemm_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
