// A program whose CUDA runtime is one of stand_in_cudart.cc's.
#include <cstddef>

extern "C" int cudaMalloc(void** p, size_t size);

int main() {
  void* p = nullptr;
  return cudaMalloc(&p, 64) == 35 ? 0 : 1;
}
