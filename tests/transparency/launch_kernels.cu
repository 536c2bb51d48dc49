// launch_report's kernels, one translation unit of the program: compiled by nvcc for a GPU (the
// kernels with their fatbin), or by g++ for simgpu (their host side: the exported names
// cudaLaunchKernel and cudaMemcpyToSymbol find; the code runs in the simgpu module built from the
// same header). Without relocatable device code nvcc gives the variables' host shadows internal
// linkage, so the program's other translation unit gets them by address, as any program does.
#include "launch_kernels.cuh"

const void* coefficients_symbol() {
  return &coefficients;
}
const void* evaluated_symbol() {
  return &evaluated;
}
