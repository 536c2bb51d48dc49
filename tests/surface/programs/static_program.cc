// A program linked statically (-static): no dynamic loader runs for it, so LD_LIBRARY_PATH, and
// with it phos's libraries, means nothing to it.
#include <cstdio>

int main() {
  std::printf("started\n");
  return 0;
}
