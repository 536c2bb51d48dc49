// graph_report's kernels, one translation unit of the program: compiled by nvcc for a GPU (the
// kernels with their fatbin), or by g++ for simgpu (their host side: the exported names the
// runtime finds; the code runs in the simgpu module built from the same header).
#include "graph_kernels.cuh"
