// A plain CUDA program: the toolkit's headers only, linked against NVIDIA's libcudart and
// libcublas. frontend_test.cc runs it with LD_LIBRARY_PATH=<build>/lib/phos/frontend, so that phos's
// libraries replace NVIDIA's and every call runs in the API server. It checks its own result.
#include <cmath>
#include <cstdio>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

int main() {
  const int m = 64, n = 48, k = 32;
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.f);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7) - 3.f;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5) * 0.5f;
  float *da, *db, *dc;
  if (cudaMalloc(&da, a.size() * 4) != cudaSuccess || cudaMalloc(&db, b.size() * 4) != cudaSuccess ||
      cudaMalloc(&dc, c.size() * 4) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  const float one = 1.f, zero = 0.f;
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, db, k, &zero, dc, m) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasSgemm failed\n");
    return 1;
  }
  cudaError_t e = cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cudaMemcpy: %s\n", cudaGetErrorString(e));
    return 1;
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float want = 0;
      for (int p = 0; p < k; ++p) want += a[p * m + i] * b[j * k + p];
      if (std::fabs(c[j * m + i] - want) > 1e-3f * (1 + std::fabs(want))) {
        std::fprintf(stderr, "C[%d,%d] = %g, expected %g\n", i, j, c[j * m + i], want);
        return 1;
      }
    }
  }
  cublasDestroy(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  std::printf("plain CUDA program: sgemm %dx%dx%d correct\n", m, n, k);
  return 0;
}
