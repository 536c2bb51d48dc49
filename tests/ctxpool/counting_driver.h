// A test-only decorator of the driver table: counts live contexts, cuBLAS handles, streams and modules,
// and fails context or cuBLAS handle creation on demand, by replacing the table's entry points.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>

#include "phos/driver/driver_table.h"

namespace phos::ctxpool::testing {

struct DriverCounters {
  std::atomic<int> contexts{0};
  std::atomic<int> blas_handles{0};
  std::atomic<int> streams{0};
  std::atomic<int> modules{0};  // loaded (cuModuleLoadData) and not unloaded
  // The next this-many cuCtxCreate / cublasCreate calls fail with the codes below.
  std::atomic<int> fail_context_creates{0};
  std::atomic<int> fail_blas_creates{0};
  std::atomic<CUresult> context_failure{CUDA_ERROR_OUT_OF_MEMORY};
};

// A simgpu driver table whose creation and destruction entry points count into (and fail as
// told by) the returned counters. One decorated table per process: the counters are global.
std::shared_ptr<driver::DriverTable> OpenCountingDriver(DriverCounters** counters);

}  // namespace phos::ctxpool::testing
