#pragma once

#include <cstddef>

#include <cuda.h>

namespace phos::sim {

struct ErrorEntry {
  CUresult code;
  const char* name;    // "CUDA_ERROR_OUT_OF_MEMORY"
  const char* string;  // "out of memory"
};

extern const ErrorEntry kErrorTable[];
extern const size_t kErrorTableSize;

// The entry for `code`, or nullptr for a code cuda.h does not define.
const ErrorEntry* FindError(CUresult code);

}  // namespace phos::sim
