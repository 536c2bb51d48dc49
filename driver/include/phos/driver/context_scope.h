// Makes a context current on the calling thread for a scope and restores the caller's afterwards
// (NCCL's rule for its entry points): pool, capture and restore work runs on whatever thread
// called it, which may have a context of its own current.
#pragma once

#include "phos/driver/driver_table.h"

namespace phos::driver {

class ContextScope {
 public:
  ContextScope(DriverTable& driver, CUcontext context) : driver_(driver) {
    pushed_ = driver_.cuCtxPushCurrent(context) == CUDA_SUCCESS;
  }
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) driver_.cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  // False when the context could not be made current (invalid or destroyed).
  bool ok() const { return pushed_; }

 private:
  DriverTable& driver_;
  bool pushed_ = false;
};

}  // namespace phos::driver
