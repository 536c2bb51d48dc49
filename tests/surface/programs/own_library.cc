// A program's own library exporting a function whose name starts like the CUDA runtime's
// (cuda_init): it is the library's, not NVIDIA's, and phos has nothing to say of it.
#include <cstdio>

extern "C" int cuda_init() {
  std::printf("cuda_init: the program's own\n");
  return 7;
}
