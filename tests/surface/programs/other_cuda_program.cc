// A program built against another CUDA version's runtime (libcudart.so.12).
extern "C" int cudaRuntimeOfAnotherVersion();

int main() {
  return cudaRuntimeOfAnotherVersion() == 12 ? 0 : 1;
}
