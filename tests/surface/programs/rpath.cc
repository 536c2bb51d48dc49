// A CUDA program linked with a DT_RPATH to the toolkit's libraries (-Wl,--disable-new-dtags): the
// loader searches it before LD_LIBRARY_PATH, so even under phos-fn run it takes NVIDIA's
// libcudart, and its calls never reach phosd.
#include <cuda_runtime.h>

#include <cstdio>

int main(int argc, char**) {
  std::printf("started\n");
  if (argc > 1) {
    void* p = nullptr;
    std::printf("cudaMalloc: %d\n", static_cast<int>(cudaMalloc(&p, 64)));
  }
  return 0;
}
