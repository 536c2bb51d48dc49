// A program's own library (libcheck_helper.so, found through the program's $ORIGIN run path)
// importing a function phos lacks: phos-fn check reads the libraries a program loads too.
#include <cuda_runtime.h>

extern "C" int CheckHelperUnregister() {
  return static_cast<int>(cudaGraphicsUnregisterResource(nullptr));
}
