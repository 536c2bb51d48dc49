// Calls into libcheck_helper.so (helper.cc), which imports the CUDA functions; this file imports none.
#include <cstdio>

extern "C" int CheckHelperUnregister();

int main(int argc, char**) {
  std::printf("started\n");
  if (argc > 1) std::printf("unregister: %d\n", CheckHelperUnregister());
  return 0;
}
