// Stands for another CUDA version's runtime (soname libcudart.so.12), which a program built
// against that toolkit needs instead of libcudart.so.13.
extern "C" int cudaRuntimeOfAnotherVersion() {
  return 12;
}
