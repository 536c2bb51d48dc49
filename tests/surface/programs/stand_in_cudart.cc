// Stands for NVIDIA's CUDA runtime where a program names it other than by its soname: built as
// check_path_cudart/libcudart.so.13 without a soname (a program linked against it keeps its path
// in DT_NEEDED) and as check_unversioned_cudart/libcudart.so (the toolkit's unversioned link
// name). Like NVIDIA's, it defines cudaMalloc.
#include <cstddef>

extern "C" int cudaMalloc(void** p, size_t) {
  *p = nullptr;
  return 35;  // cudaErrorInsufficientDriver, as NVIDIA's runtime answers on a host without a GPU
}
