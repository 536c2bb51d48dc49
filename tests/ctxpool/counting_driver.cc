#include "counting_driver.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace phos::ctxpool::testing {
namespace {

DriverCounters g_counters;
driver::DriverTable* g_real = nullptr;  // undecorated entry points of the same library

}  // namespace

std::shared_ptr<driver::DriverTable> OpenCountingDriver(DriverCounters** counters) {
  // Never destroyed: a pool's refill left creating at the pool's end may still call through it
  // (the counting entry points below) while the process exits. Held by a static pointer, so
  // that LeakSanitizer sees it reachable.
  static const std::shared_ptr<driver::DriverTable>* real = [] {
    auto t = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      std::abort();
    }
    return new std::shared_ptr<driver::DriverTable>(std::move(*t));
  }();
  g_real = real->get();
  auto opened = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
  if (!opened.ok()) return nullptr;
  std::shared_ptr<driver::DriverTable> t = std::move(*opened);
  t->cuCtxCreate = [](CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                      CUdevice dev) -> CUresult {
    if (g_counters.fail_context_creates.load() > 0) {
      g_counters.fail_context_creates.fetch_sub(1);
      return g_counters.context_failure.load();
    }
    CUresult r = g_real->cuCtxCreate(ctx, params, flags, dev);
    if (r == CUDA_SUCCESS) ++g_counters.contexts;
    return r;
  };
  t->cuCtxDestroy = [](CUcontext ctx) -> CUresult {
    CUresult r = g_real->cuCtxDestroy(ctx);
    if (r == CUDA_SUCCESS) --g_counters.contexts;
    return r;
  };
  t->cublasCreate = [](cublasHandle_t* h) -> cublasStatus_t {
    if (g_counters.fail_blas_creates.load() > 0) {
      g_counters.fail_blas_creates.fetch_sub(1);
      return CUBLAS_STATUS_ALLOC_FAILED;
    }
    cublasStatus_t s = g_real->cublasCreate(h);
    if (s == CUBLAS_STATUS_SUCCESS) ++g_counters.blas_handles;
    return s;
  };
  t->cublasDestroy = [](cublasHandle_t h) -> cublasStatus_t {
    cublasStatus_t s = g_real->cublasDestroy(h);
    if (s == CUBLAS_STATUS_SUCCESS) --g_counters.blas_handles;
    return s;
  };
  t->cuStreamCreate = [](CUstream* s, unsigned int flags) -> CUresult {
    CUresult r = g_real->cuStreamCreate(s, flags);
    if (r == CUDA_SUCCESS) ++g_counters.streams;
    return r;
  };
  t->cuStreamDestroy = [](CUstream s) -> CUresult {
    CUresult r = g_real->cuStreamDestroy(s);
    if (r == CUDA_SUCCESS) --g_counters.streams;
    return r;
  };
  t->cuModuleLoadData = [](CUmodule* m, const void* image) -> CUresult {
    CUresult r = g_real->cuModuleLoadData(m, image);
    if (r == CUDA_SUCCESS) ++g_counters.modules;
    return r;
  };
  t->cuModuleUnload = [](CUmodule m) -> CUresult {
    CUresult r = g_real->cuModuleUnload(m);
    if (r == CUDA_SUCCESS) --g_counters.modules;
    return r;
  };
  *counters = &g_counters;
  return t;
}

}  // namespace phos::ctxpool::testing
