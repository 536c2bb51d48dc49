// A program using cuBLASLt, linked against NVIDIA's libcublasLt: under phos-fn run the loader takes
// phos's.
#include <cublasLt.h>

#include <cstdio>

int main() {
  cublasLtHandle_t handle;
  cublasStatus_t s = cublasLtCreate(&handle);
  std::printf("cublasLtCreate: %d\n", static_cast<int>(s));
  if (s == CUBLAS_STATUS_SUCCESS) cublasLtDestroy(handle);
  return 0;
}
