// The process the crash-consistency tests kill: store_crash_writer DIR SEED.
#include <cstdio>
#include <cstdlib>

#include "crash_workload.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR SEED\n", argv[0]);
    return 2;
  }
  return phos::store::testing::RunCrashWriter(argv[1], std::strtoull(argv[2], nullptr, 10));
}
