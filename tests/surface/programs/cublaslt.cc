// A program using cuBLASLt, for which phos has no library yet: the loader finds NVIDIA's, which
// answers outside phosd.
#include <cublasLt.h>

#include <cstdio>

int main() {
  cublasLtHandle_t handle;
  cublasStatus_t s = cublasLtCreate(&handle);
  std::printf("cublasLtCreate: %d\n", static_cast<int>(s));
  if (s == CUBLAS_STATUS_SUCCESS) cublasLtDestroy(handle);
  return 0;
}
