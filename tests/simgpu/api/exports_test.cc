// libphos-simgpu.so exports every entry point phos uses under the name cuda.h maps it to
// (cuCtxCreate -> cuCtxCreate_v4, ...): the names phos's driver table will dlsym, whichever
// library it opens.
#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda.h>
#include <gtest/gtest.h>
#include <nccl.h>

namespace {

// Expands cuda.h's mapping macro before stringifying: PHOS_MAPPED(cuMemAlloc) is "cuMemAlloc_v2".
#define PHOS_STRINGIFY(x) #x
#define PHOS_MAPPED(x) PHOS_STRINGIFY(x)

const std::vector<std::string>& ExpectedSymbols() {
  static const std::vector<std::string> symbols = {
      PHOS_MAPPED(cuInit), PHOS_MAPPED(cuDriverGetVersion), PHOS_MAPPED(cuDeviceGet),
      PHOS_MAPPED(cuDeviceGetCount), PHOS_MAPPED(cuDeviceGetName), PHOS_MAPPED(cuDeviceGetUuid),
      PHOS_MAPPED(cuDeviceTotalMem), PHOS_MAPPED(cuDeviceGetAttribute), PHOS_MAPPED(cuDevicePrimaryCtxRetain),
      PHOS_MAPPED(cuDevicePrimaryCtxRelease), PHOS_MAPPED(cuCtxCreate), PHOS_MAPPED(cuCtxDestroy),
      PHOS_MAPPED(cuCtxSetCurrent), PHOS_MAPPED(cuCtxGetCurrent), PHOS_MAPPED(cuCtxPushCurrent),
      PHOS_MAPPED(cuCtxPopCurrent), PHOS_MAPPED(cuCtxSynchronize), PHOS_MAPPED(cuDeviceCanAccessPeer),
      PHOS_MAPPED(cuCtxEnablePeerAccess), PHOS_MAPPED(cuCtxDisablePeerAccess), PHOS_MAPPED(cuMemAlloc),
      PHOS_MAPPED(cuMemFree), PHOS_MAPPED(cuMemGetInfo), PHOS_MAPPED(cuMemHostAlloc), PHOS_MAPPED(cuMemFreeHost),
      PHOS_MAPPED(cuMemHostRegister), PHOS_MAPPED(cuMemHostUnregister), PHOS_MAPPED(cuMemsetD8),
      PHOS_MAPPED(cuMemsetD32), PHOS_MAPPED(cuMemsetD8Async), PHOS_MAPPED(cuMemsetD32Async),
      PHOS_MAPPED(cuMemcpyHtoD), PHOS_MAPPED(cuMemcpyDtoH), PHOS_MAPPED(cuMemcpyDtoD),
      PHOS_MAPPED(cuMemcpyHtoDAsync), PHOS_MAPPED(cuMemcpyDtoHAsync), PHOS_MAPPED(cuMemcpyDtoDAsync),
      PHOS_MAPPED(cuMemcpyAsync), PHOS_MAPPED(cuMemcpy2D), PHOS_MAPPED(cuMemcpy2DUnaligned),
      PHOS_MAPPED(cuMemcpy2DAsync), PHOS_MAPPED(cuMemsetD16), PHOS_MAPPED(cuMemsetD16Async),
      PHOS_MAPPED(cuMemsetD2D8), PHOS_MAPPED(cuMemsetD2D16), PHOS_MAPPED(cuMemsetD2D32),
      PHOS_MAPPED(cuMemsetD2D8Async), PHOS_MAPPED(cuMemsetD2D16Async), PHOS_MAPPED(cuMemsetD2D32Async),
      PHOS_MAPPED(cuMemAddressReserve), PHOS_MAPPED(cuMemAddressFree),
      PHOS_MAPPED(cuMemCreate), PHOS_MAPPED(cuMemRelease), PHOS_MAPPED(cuMemMap), PHOS_MAPPED(cuMemUnmap),
      PHOS_MAPPED(cuMemSetAccess), PHOS_MAPPED(cuMemGetAllocationGranularity), PHOS_MAPPED(cuStreamCreate),
      PHOS_MAPPED(cuStreamDestroy), PHOS_MAPPED(cuStreamSynchronize), PHOS_MAPPED(cuStreamQuery),
      PHOS_MAPPED(cuStreamWaitEvent), PHOS_MAPPED(cuStreamCreateWithPriority), PHOS_MAPPED(cuStreamGetPriority),
      PHOS_MAPPED(cuStreamGetFlags), PHOS_MAPPED(cuCtxGetStreamPriorityRange), PHOS_MAPPED(cuStreamWaitValue32),
      PHOS_MAPPED(cuStreamWriteValue32), PHOS_MAPPED(cuStreamWaitValue64), PHOS_MAPPED(cuStreamWriteValue64),
      PHOS_MAPPED(cuEventCreate), PHOS_MAPPED(cuEventRecord),
      PHOS_MAPPED(cuEventSynchronize), PHOS_MAPPED(cuEventQuery), PHOS_MAPPED(cuEventElapsedTime),
      PHOS_MAPPED(cuEventDestroy), PHOS_MAPPED(cuLaunchHostFunc), PHOS_MAPPED(cuModuleLoadData),
      PHOS_MAPPED(cuModuleUnload), PHOS_MAPPED(cuModuleGetFunction), PHOS_MAPPED(cuFuncGetParamInfo),
      PHOS_MAPPED(cuLaunchKernel), PHOS_MAPPED(cuGetErrorName), PHOS_MAPPED(cuGetErrorString),
      PHOS_MAPPED(cuModuleGetGlobal), PHOS_MAPPED(cuFuncGetAttribute), PHOS_MAPPED(cuFuncSetAttribute),
      PHOS_MAPPED(cuFuncSetCacheConfig), PHOS_MAPPED(cuOccupancyMaxActiveBlocksPerMultiprocessor),
      PHOS_MAPPED(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),
      PHOS_MAPPED(cuOccupancyAvailableDynamicSMemPerBlock), PHOS_MAPPED(cuLaunchKernelEx),
      PHOS_MAPPED(cuGraphCreate), PHOS_MAPPED(cuGraphDestroy), PHOS_MAPPED(cuGraphAddKernelNode),
      PHOS_MAPPED(cuGraphKernelNodeGetParams), PHOS_MAPPED(cuGraphKernelNodeSetParams),
      PHOS_MAPPED(cuGraphAddMemcpyNode), PHOS_MAPPED(cuGraphAddMemsetNode), PHOS_MAPPED(cuGraphAddHostNode),
      PHOS_MAPPED(cuGraphAddEmptyNode), PHOS_MAPPED(cuGraphAddEventRecordNode), PHOS_MAPPED(cuGraphAddEventWaitNode),
      PHOS_MAPPED(cuGraphAddDependencies), PHOS_MAPPED(cuGraphGetNodes), PHOS_MAPPED(cuGraphGetRootNodes),
      PHOS_MAPPED(cuGraphNodeGetType), PHOS_MAPPED(cuGraphDestroyNode), PHOS_MAPPED(cuGraphClone),
      PHOS_MAPPED(cuGraphInstantiate), PHOS_MAPPED(cuGraphUpload), PHOS_MAPPED(cuGraphLaunch),
      PHOS_MAPPED(cuGraphExecUpdate), PHOS_MAPPED(cuGraphExecKernelNodeSetParams), PHOS_MAPPED(cuGraphExecDestroy),
  };
  return symbols;
}

TEST(ExportsTest, EveryEntryPointUnderItsCudaHName) {
  void* lib = dlopen(PHOS_SIMGPU_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const std::string& name : ExpectedSymbols()) {
    EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << name << " is not exported";
  }
  // The mapping really is applied: the versioned names, not the plain ones.
  EXPECT_EQ(std::string(PHOS_MAPPED(cuCtxCreate)), "cuCtxCreate_v4");
  EXPECT_EQ(std::string(PHOS_MAPPED(cuMemAlloc)), "cuMemAlloc_v2");
  EXPECT_EQ(std::string(PHOS_MAPPED(cuModuleGetGlobal)), "cuModuleGetGlobal_v2");
  EXPECT_EQ(std::string(PHOS_MAPPED(cuStreamWaitValue32)), "cuStreamWaitValue32_v2");
  dlclose(lib);
}

TEST(ExportsTest, EverySimgpuExtension) {
  void* lib = dlopen(PHOS_SIMGPU_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  // The phosSim* names phos's driver table resolves (phos/simgpu/simgpu.h).
  for (const char* name : {"phosSimConfigure", "phosSimGetConfig", "phosSimGetProfile", "phosSimGetNamedProfile", "phosSimGetStats",
                           "phosSimResetStats", "phosSimGuardRange", "phosSimUnguardRange",
                           "phosSimSetGuardHandler", "phosSimWriteGuarded", "phosSimMemcpyHtoDAsyncGuarded",
                           "phosSimGuardRangeWrites"}) {
    EXPECT_NE(dlsym(lib, name), nullptr) << name << " is not exported";
  }
  dlclose(lib);
}

TEST(ExportsTest, InternalSymbolsStayHidden) {
  void* lib = dlopen(PHOS_SIMGPU_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  // Mangled phos::sim internals (here the driver singleton's accessor) are not part of the ABI.
  EXPECT_EQ(dlsym(lib, "_ZN4phos3sim6Driver4InitEv"), nullptr);
  dlclose(lib);
}

// The cuBLAS and NCCL registries are created by cuInit: before it, calls are refused, not a crash.
TEST(ExportsTest, CublasAndNcclBeforeCuInitAreRefused) {
  void* lib = dlopen(PHOS_SIMGPU_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto get_unique_id = reinterpret_cast<ncclResult_t (*)(ncclUniqueId*)>(dlsym(lib, "ncclGetUniqueId"));
  auto group_start = reinterpret_cast<ncclResult_t (*)()>(dlsym(lib, "ncclGroupStart"));
  auto group_end = reinterpret_cast<ncclResult_t (*)()>(dlsym(lib, "ncclGroupEnd"));
  auto comm_count = reinterpret_cast<ncclResult_t (*)(ncclComm_t, int*)>(dlsym(lib, "ncclCommCount"));
  auto blas_create =
      reinterpret_cast<cublasStatus_t (*)(cublasHandle_t*)>(dlsym(lib, PHOS_MAPPED(cublasCreate)));
  auto blas_destroy =
      reinterpret_cast<cublasStatus_t (*)(cublasHandle_t)>(dlsym(lib, PHOS_MAPPED(cublasDestroy)));
  ASSERT_TRUE(get_unique_id && group_start && group_end && comm_count && blas_create && blas_destroy);

  ncclUniqueId id{};
  EXPECT_EQ(get_unique_id(&id), ncclUnhandledCudaError);
  EXPECT_EQ(group_start(), ncclSuccess);
  EXPECT_EQ(group_end(), ncclSuccess);
  int count = 0;
  EXPECT_EQ(comm_count(reinterpret_cast<ncclComm_t>(uintptr_t{0x4100000000000010}), &count),
            ncclInvalidArgument);
  cublasHandle_t handle = nullptr;
  EXPECT_EQ(blas_create(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(blas_destroy(handle), CUBLAS_STATUS_NOT_INITIALIZED);
  dlclose(lib);
}

}  // namespace
