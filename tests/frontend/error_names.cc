// Prints cudaGetErrorName and cudaGetErrorString of every value from -100 to 12000 and a few far
// ones, one per line: built against NVIDIA's libcudart, frontend_test runs it with NVIDIA's library
// and with phos's in its place and compares the two outputs.
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdio>
#include <initializer_list>

namespace {

void Print(int value) {
  const auto error = static_cast<cudaError_t>(value);
  std::printf("%d\t%s\t%s\n", value, cudaGetErrorName(error), cudaGetErrorString(error));
}

}  // namespace

int main() {
  for (int value = -100; value <= 12000; ++value) Print(value);
  for (int value : {INT_MIN, INT_MIN + 1, 65535, 1 << 20, INT_MAX}) Print(value);
  return 0;
}
