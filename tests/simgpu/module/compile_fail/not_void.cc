// Must not compile: a kernel returns void.
#include "phos/kernel.h"

PHOS_GLOBAL int returns_value(int* x) {
  return *x;
}
PHOS_EXPORT_KERNEL(returns_value);
