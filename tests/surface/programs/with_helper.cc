// Calls into libcheck_helper.so (helper.cc), which imports the CUDA functions; this file imports none.
#include <cstdio>

extern "C" int CheckHelperMakeGraph();

int main(int argc, char**) {
  std::printf("started\n");
  if (argc > 1) std::printf("graph: %d\n", CheckHelperMakeGraph());
  return 0;
}
