// Calls cuda_init from its own library (own_library.cc) and imports cudaHostAlloc, which phos
// serves but for mapped memory (refused.tsv); it calls that only when asked, as no phosd runs.
#include <cuda_runtime.h>

#include <cstdio>

extern "C" int cuda_init();

int main(int argc, char**) {
  std::printf("started %d\n", cuda_init());
  if (argc > 1) {
    void* p = nullptr;
    std::printf("cudaHostAlloc: %d\n", static_cast<int>(cudaHostAlloc(&p, 64, cudaHostAllocDefault)));
  }
  return 0;
}
