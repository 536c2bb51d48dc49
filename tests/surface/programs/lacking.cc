// A CUDA program importing a function phos lacks (cudaGraphicsUnregisterResource, graphics
// interoperability), which it calls only when asked ("call"): linked lazily, it loads on phos's
// libraries and ends at that call; linked with -z now, the loader refuses it before main.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  std::printf("started\n");
  std::fflush(stdout);
  if (argc > 1 && std::strcmp(argv[1], "call") == 0) {
    std::printf("cudaGraphicsUnregisterResource: %d\n",
                static_cast<int>(cudaGraphicsUnregisterResource(nullptr)));
  }
  return 0;
}
