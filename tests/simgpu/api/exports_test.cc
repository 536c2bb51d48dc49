// libphos-simgpu.so exports every entry point phos uses under the name cuda.h maps it to
// (cuCtxCreate -> cuCtxCreate_v4, ...): the names phos's driver table will dlsym, whichever
// library it opens.
#include <dlfcn.h>

#include <string>
#include <vector>

#include <cuda.h>
#include <gtest/gtest.h>

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
      PHOS_MAPPED(cuCtxPopCurrent), PHOS_MAPPED(cuCtxSynchronize), PHOS_MAPPED(cuMemAlloc),
      PHOS_MAPPED(cuMemFree), PHOS_MAPPED(cuMemGetInfo), PHOS_MAPPED(cuMemHostAlloc), PHOS_MAPPED(cuMemFreeHost),
      PHOS_MAPPED(cuMemHostRegister), PHOS_MAPPED(cuMemHostUnregister), PHOS_MAPPED(cuMemsetD8),
      PHOS_MAPPED(cuMemsetD32), PHOS_MAPPED(cuMemsetD8Async), PHOS_MAPPED(cuMemsetD32Async),
      PHOS_MAPPED(cuMemcpyHtoD), PHOS_MAPPED(cuMemcpyDtoH), PHOS_MAPPED(cuMemcpyDtoD),
      PHOS_MAPPED(cuMemcpyHtoDAsync), PHOS_MAPPED(cuMemcpyDtoHAsync), PHOS_MAPPED(cuMemcpyDtoDAsync),
      PHOS_MAPPED(cuMemcpyAsync), PHOS_MAPPED(cuMemAddressReserve), PHOS_MAPPED(cuMemAddressFree),
      PHOS_MAPPED(cuMemCreate), PHOS_MAPPED(cuMemRelease), PHOS_MAPPED(cuMemMap), PHOS_MAPPED(cuMemUnmap),
      PHOS_MAPPED(cuMemSetAccess), PHOS_MAPPED(cuMemGetAllocationGranularity), PHOS_MAPPED(cuStreamCreate),
      PHOS_MAPPED(cuStreamDestroy), PHOS_MAPPED(cuStreamSynchronize), PHOS_MAPPED(cuStreamQuery),
      PHOS_MAPPED(cuStreamWaitEvent), PHOS_MAPPED(cuEventCreate), PHOS_MAPPED(cuEventRecord),
      PHOS_MAPPED(cuEventSynchronize), PHOS_MAPPED(cuEventQuery), PHOS_MAPPED(cuEventElapsedTime),
      PHOS_MAPPED(cuEventDestroy), PHOS_MAPPED(cuLaunchHostFunc), PHOS_MAPPED(cuModuleLoadData),
      PHOS_MAPPED(cuModuleUnload), PHOS_MAPPED(cuModuleGetFunction), PHOS_MAPPED(cuFuncGetParamInfo),
      PHOS_MAPPED(cuLaunchKernel), PHOS_MAPPED(cuGetErrorName), PHOS_MAPPED(cuGetErrorString),
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
  dlclose(lib);
}

TEST(ExportsTest, EverySimgpuExtension) {
  void* lib = dlopen(PHOS_SIMGPU_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  // The phosSim* names phos's driver table resolves (phos/simgpu/simgpu.h).
  for (const char* name : {"phosSimConfigure", "phosSimGetConfig", "phosSimGetProfile", "phosSimGetStats",
                           "phosSimResetStats", "phosSimGuardRange", "phosSimUnguardRange",
                           "phosSimSetGuardHandler", "phosSimWriteGuarded", "phosSimMemcpyHtoDAsyncGuarded"}) {
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

}  // namespace
