// A CUDA program as its users write one: the toolkit's headers, NVIDIA's libcudart, nothing of
// phos. It prints every device attribute the runtime names and every cudaDeviceProp field of every
// device, checks them against what it can derive itself (the properties against the attributes,
// the limits the CUDA C++ Programming Guide gives for the compute capability, PCI bus ids both
// ways, the invariants between fields), and exits 0 only when every check held. transparency_test
// runs it under `phos-fn run`, where phos's libcudart takes NVIDIA's place.
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include <cuda_runtime_api.h>

namespace {

// Every enumerator of cudaDeviceAttr in the CUDA 13 headers.
#define DEVICE_ATTRIBUTES(X) \
  X(cudaDevAttrMaxThreadsPerBlock) X(cudaDevAttrMaxBlockDimX) X(cudaDevAttrMaxBlockDimY) \
  X(cudaDevAttrMaxBlockDimZ) X(cudaDevAttrMaxGridDimX) X(cudaDevAttrMaxGridDimY) X(cudaDevAttrMaxGridDimZ) \
  X(cudaDevAttrMaxSharedMemoryPerBlock) X(cudaDevAttrTotalConstantMemory) X(cudaDevAttrWarpSize) \
  X(cudaDevAttrMaxPitch) X(cudaDevAttrMaxRegistersPerBlock) X(cudaDevAttrClockRate) \
  X(cudaDevAttrTextureAlignment) X(cudaDevAttrGpuOverlap) X(cudaDevAttrMultiProcessorCount) \
  X(cudaDevAttrKernelExecTimeout) X(cudaDevAttrIntegrated) X(cudaDevAttrCanMapHostMemory) \
  X(cudaDevAttrComputeMode) X(cudaDevAttrMaxTexture1DWidth) X(cudaDevAttrMaxTexture2DWidth) \
  X(cudaDevAttrMaxTexture2DHeight) X(cudaDevAttrMaxTexture3DWidth) X(cudaDevAttrMaxTexture3DHeight) \
  X(cudaDevAttrMaxTexture3DDepth) X(cudaDevAttrMaxTexture2DLayeredWidth) \
  X(cudaDevAttrMaxTexture2DLayeredHeight) X(cudaDevAttrMaxTexture2DLayeredLayers) \
  X(cudaDevAttrSurfaceAlignment) X(cudaDevAttrConcurrentKernels) X(cudaDevAttrEccEnabled) \
  X(cudaDevAttrPciBusId) X(cudaDevAttrPciDeviceId) X(cudaDevAttrTccDriver) X(cudaDevAttrMemoryClockRate) \
  X(cudaDevAttrGlobalMemoryBusWidth) X(cudaDevAttrL2CacheSize) X(cudaDevAttrMaxThreadsPerMultiProcessor) \
  X(cudaDevAttrAsyncEngineCount) X(cudaDevAttrUnifiedAddressing) X(cudaDevAttrMaxTexture1DLayeredWidth) \
  X(cudaDevAttrMaxTexture1DLayeredLayers) X(cudaDevAttrMaxTexture2DGatherWidth) \
  X(cudaDevAttrMaxTexture2DGatherHeight) X(cudaDevAttrMaxTexture3DWidthAlt) \
  X(cudaDevAttrMaxTexture3DHeightAlt) X(cudaDevAttrMaxTexture3DDepthAlt) X(cudaDevAttrPciDomainId) \
  X(cudaDevAttrTexturePitchAlignment) X(cudaDevAttrMaxTextureCubemapWidth) \
  X(cudaDevAttrMaxTextureCubemapLayeredWidth) X(cudaDevAttrMaxTextureCubemapLayeredLayers) \
  X(cudaDevAttrMaxSurface1DWidth) X(cudaDevAttrMaxSurface2DWidth) X(cudaDevAttrMaxSurface2DHeight) \
  X(cudaDevAttrMaxSurface3DWidth) X(cudaDevAttrMaxSurface3DHeight) X(cudaDevAttrMaxSurface3DDepth) \
  X(cudaDevAttrMaxSurface1DLayeredWidth) X(cudaDevAttrMaxSurface1DLayeredLayers) \
  X(cudaDevAttrMaxSurface2DLayeredWidth) X(cudaDevAttrMaxSurface2DLayeredHeight) \
  X(cudaDevAttrMaxSurface2DLayeredLayers) X(cudaDevAttrMaxSurfaceCubemapWidth) \
  X(cudaDevAttrMaxSurfaceCubemapLayeredWidth) X(cudaDevAttrMaxSurfaceCubemapLayeredLayers) \
  X(cudaDevAttrMaxTexture1DLinearWidth) X(cudaDevAttrMaxTexture2DLinearWidth) \
  X(cudaDevAttrMaxTexture2DLinearHeight) X(cudaDevAttrMaxTexture2DLinearPitch) \
  X(cudaDevAttrMaxTexture2DMipmappedWidth) X(cudaDevAttrMaxTexture2DMipmappedHeight) \
  X(cudaDevAttrComputeCapabilityMajor) X(cudaDevAttrComputeCapabilityMinor) \
  X(cudaDevAttrMaxTexture1DMipmappedWidth) X(cudaDevAttrStreamPrioritiesSupported) \
  X(cudaDevAttrGlobalL1CacheSupported) X(cudaDevAttrLocalL1CacheSupported) \
  X(cudaDevAttrMaxSharedMemoryPerMultiprocessor) X(cudaDevAttrMaxRegistersPerMultiprocessor) \
  X(cudaDevAttrManagedMemory) X(cudaDevAttrIsMultiGpuBoard) X(cudaDevAttrMultiGpuBoardGroupID) \
  X(cudaDevAttrHostNativeAtomicSupported) X(cudaDevAttrSingleToDoublePrecisionPerfRatio) \
  X(cudaDevAttrPageableMemoryAccess) X(cudaDevAttrConcurrentManagedAccess) \
  X(cudaDevAttrComputePreemptionSupported) X(cudaDevAttrCanUseHostPointerForRegisteredMem) \
  X(cudaDevAttrReserved92) X(cudaDevAttrReserved93) X(cudaDevAttrReserved94) X(cudaDevAttrCooperativeLaunch) \
  X(cudaDevAttrReserved96) X(cudaDevAttrMaxSharedMemoryPerBlockOptin) X(cudaDevAttrCanFlushRemoteWrites) \
  X(cudaDevAttrHostRegisterSupported) X(cudaDevAttrPageableMemoryAccessUsesHostPageTables) \
  X(cudaDevAttrDirectManagedMemAccessFromHost) X(cudaDevAttrMaxBlocksPerMultiprocessor) \
  X(cudaDevAttrMaxPersistingL2CacheSize) X(cudaDevAttrMaxAccessPolicyWindowSize) \
  X(cudaDevAttrReservedSharedMemoryPerBlock) X(cudaDevAttrSparseCudaArraySupported) \
  X(cudaDevAttrHostRegisterReadOnlySupported) X(cudaDevAttrTimelineSemaphoreInteropSupported) \
  X(cudaDevAttrMemoryPoolsSupported) X(cudaDevAttrGPUDirectRDMASupported) \
  X(cudaDevAttrGPUDirectRDMAFlushWritesOptions) X(cudaDevAttrGPUDirectRDMAWritesOrdering) \
  X(cudaDevAttrMemoryPoolSupportedHandleTypes) X(cudaDevAttrClusterLaunch) \
  X(cudaDevAttrDeferredMappingCudaArraySupported) X(cudaDevAttrReserved122) X(cudaDevAttrReserved123) \
  X(cudaDevAttrReserved124) X(cudaDevAttrIpcEventSupport) X(cudaDevAttrMemSyncDomainCount) \
  X(cudaDevAttrReserved127) X(cudaDevAttrReserved128) X(cudaDevAttrReserved129) X(cudaDevAttrNumaConfig) \
  X(cudaDevAttrNumaId) X(cudaDevAttrReserved132) X(cudaDevAttrMpsEnabled) X(cudaDevAttrHostNumaId) \
  X(cudaDevAttrD3D12CigSupported) X(cudaDevAttrVulkanCigSupported) X(cudaDevAttrGpuPciDeviceId) \
  X(cudaDevAttrGpuPciSubsystemId) X(cudaDevAttrReserved141) X(cudaDevAttrHostNumaMemoryPoolsSupported) \
  X(cudaDevAttrHostNumaMultinodeIpcSupported) X(cudaDevAttrHostMemoryPoolsSupported) \
  X(cudaDevAttrReserved145) X(cudaDevAttrOnlyPartialHostNativeAtomicSupported)

int g_failures = 0;
int g_checks = 0;

void Check(bool ok, int device, const std::string& what) {
  ++g_checks;
  if (ok) return;
  std::printf("CHECK FAILED (device %d): %s\n", device, what.c_str());
  ++g_failures;
}

#define CHECK_CUDA(device, call)                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    Check(e_ == cudaSuccess, device, std::string(#call) + ": " + cudaGetErrorName(e_));            \
  } while (0)

int Attribute(int device, cudaDeviceAttr attribute) {
  int value = 0;
  cudaError_t e = cudaDeviceGetAttribute(&value, attribute, device);
  Check(e == cudaSuccess, device, "attribute " + std::to_string(attribute) + ": " + cudaGetErrorName(e));
  return value;
}

// Prints every attribute; each must answer.
int PrintAttributes(int device) {
  int count = 0;
#define PRINT_ATTRIBUTE(name)                                                     \
  {                                                                               \
    int value = 0;                                                                \
    cudaError_t e = cudaDeviceGetAttribute(&value, name, device);                 \
    if (e == cudaSuccess) {                                                       \
      std::printf("  %s = %d\n", #name, value);                                  \
    } else {                                                                      \
      std::printf("  %s: %s\n", #name, cudaGetErrorName(e));                     \
    }                                                                             \
    Check(e == cudaSuccess, device, std::string(#name) + " answers");             \
    ++count;                                                                      \
  }
  DEVICE_ATTRIBUTES(PRINT_ATTRIBUTE)
#undef PRINT_ATTRIBUTE
  return count;
}

void PrintProperties(const cudaDeviceProp& p) {
#define FIELD(name) std::printf("  prop.%s = %lld\n", #name, static_cast<long long>(p.name))
#define FIELDS(name, n)                                                     \
  do {                                                                      \
    std::printf("  prop.%s = {", #name);                                    \
    for (int i_ = 0; i_ < (n); ++i_) std::printf(i_ ? ", %d" : "%d", p.name[i_]); \
    std::printf("}\n");                                                     \
  } while (0)
  std::printf("  prop.name = \"%s\"\n", p.name);
  std::printf("  prop.uuid =");
  for (unsigned char b : p.uuid.bytes) std::printf(" %02x", b);
  std::printf("\n  prop.luid =");
  for (unsigned char b : p.luid) std::printf(" %02x", b);
  std::printf("\n");
  FIELD(luidDeviceNodeMask); FIELD(totalGlobalMem); FIELD(sharedMemPerBlock); FIELD(regsPerBlock);
  FIELD(warpSize); FIELD(memPitch); FIELD(maxThreadsPerBlock); FIELDS(maxThreadsDim, 3); FIELDS(maxGridSize, 3);
  FIELD(totalConstMem); FIELD(major); FIELD(minor); FIELD(textureAlignment); FIELD(texturePitchAlignment);
  FIELD(multiProcessorCount); FIELD(integrated); FIELD(canMapHostMemory); FIELD(maxTexture1D);
  FIELD(maxTexture1DMipmap); FIELDS(maxTexture2D, 2); FIELDS(maxTexture2DMipmap, 2); FIELDS(maxTexture2DLinear, 3);
  FIELDS(maxTexture2DGather, 2); FIELDS(maxTexture3D, 3); FIELDS(maxTexture3DAlt, 3); FIELD(maxTextureCubemap);
  FIELDS(maxTexture1DLayered, 2); FIELDS(maxTexture2DLayered, 3); FIELDS(maxTextureCubemapLayered, 2);
  FIELD(maxSurface1D); FIELDS(maxSurface2D, 2); FIELDS(maxSurface3D, 3); FIELDS(maxSurface1DLayered, 2);
  FIELDS(maxSurface2DLayered, 3); FIELD(maxSurfaceCubemap); FIELDS(maxSurfaceCubemapLayered, 2);
  FIELD(surfaceAlignment); FIELD(concurrentKernels); FIELD(ECCEnabled); FIELD(pciBusID); FIELD(pciDeviceID);
  FIELD(pciDomainID); FIELD(tccDriver); FIELD(asyncEngineCount); FIELD(unifiedAddressing); FIELD(memoryBusWidth);
  FIELD(l2CacheSize); FIELD(persistingL2CacheMaxSize); FIELD(maxThreadsPerMultiProcessor);
  FIELD(streamPrioritiesSupported); FIELD(globalL1CacheSupported); FIELD(localL1CacheSupported);
  FIELD(sharedMemPerMultiprocessor); FIELD(regsPerMultiprocessor); FIELD(managedMemory); FIELD(isMultiGpuBoard);
  FIELD(multiGpuBoardGroupID); FIELD(hostNativeAtomicSupported); FIELD(pageableMemoryAccess);
  FIELD(concurrentManagedAccess); FIELD(computePreemptionSupported); FIELD(canUseHostPointerForRegisteredMem);
  FIELD(cooperativeLaunch); FIELD(sharedMemPerBlockOptin); FIELD(pageableMemoryAccessUsesHostPageTables);
  FIELD(directManagedMemAccessFromHost); FIELD(maxBlocksPerMultiProcessor); FIELD(accessPolicyMaxWindowSize);
  FIELD(reservedSharedMemPerBlock); FIELD(hostRegisterSupported); FIELD(sparseCudaArraySupported);
  FIELD(hostRegisterReadOnlySupported); FIELD(timelineSemaphoreInteropSupported); FIELD(memoryPoolsSupported);
  FIELD(gpuDirectRDMASupported); FIELD(gpuDirectRDMAFlushWritesOptions); FIELD(gpuDirectRDMAWritesOrdering);
  FIELD(memoryPoolSupportedHandleTypes); FIELD(deferredMappingCudaArraySupported); FIELD(ipcEventSupported);
  FIELD(clusterLaunch); FIELD(unifiedFunctionPointers); FIELD(deviceNumaConfig); FIELD(deviceNumaId);
  FIELD(mpsEnabled); FIELD(hostNumaId); FIELD(gpuPciDeviceID); FIELD(gpuPciSubsystemID);
  FIELD(hostNumaMultinodeIpcSupported);
#undef FIELD
#undef FIELDS
}

// Every property that has an attribute says what the attribute says.
void CheckPropertiesAgainstAttributes(int d, const cudaDeviceProp& p) {
  struct Pair {
    const char* field;
    long long value;
    cudaDeviceAttr attribute;
  };
  const Pair pairs[] = {
      {"sharedMemPerBlock", static_cast<long long>(p.sharedMemPerBlock), cudaDevAttrMaxSharedMemoryPerBlock},
      {"regsPerBlock", p.regsPerBlock, cudaDevAttrMaxRegistersPerBlock},
      {"warpSize", p.warpSize, cudaDevAttrWarpSize},
      {"memPitch", static_cast<long long>(p.memPitch), cudaDevAttrMaxPitch},
      {"maxThreadsPerBlock", p.maxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock},
      {"maxThreadsDim[0]", p.maxThreadsDim[0], cudaDevAttrMaxBlockDimX},
      {"maxThreadsDim[1]", p.maxThreadsDim[1], cudaDevAttrMaxBlockDimY},
      {"maxThreadsDim[2]", p.maxThreadsDim[2], cudaDevAttrMaxBlockDimZ},
      {"maxGridSize[0]", p.maxGridSize[0], cudaDevAttrMaxGridDimX},
      {"maxGridSize[1]", p.maxGridSize[1], cudaDevAttrMaxGridDimY},
      {"maxGridSize[2]", p.maxGridSize[2], cudaDevAttrMaxGridDimZ},
      {"totalConstMem", static_cast<long long>(p.totalConstMem), cudaDevAttrTotalConstantMemory},
      {"major", p.major, cudaDevAttrComputeCapabilityMajor},
      {"minor", p.minor, cudaDevAttrComputeCapabilityMinor},
      {"textureAlignment", static_cast<long long>(p.textureAlignment), cudaDevAttrTextureAlignment},
      {"texturePitchAlignment", static_cast<long long>(p.texturePitchAlignment), cudaDevAttrTexturePitchAlignment},
      {"multiProcessorCount", p.multiProcessorCount, cudaDevAttrMultiProcessorCount},
      {"integrated", p.integrated, cudaDevAttrIntegrated},
      {"canMapHostMemory", p.canMapHostMemory, cudaDevAttrCanMapHostMemory},
      {"maxTexture1D", p.maxTexture1D, cudaDevAttrMaxTexture1DWidth},
      {"maxTexture1DMipmap", p.maxTexture1DMipmap, cudaDevAttrMaxTexture1DMipmappedWidth},
      {"maxTexture2D[0]", p.maxTexture2D[0], cudaDevAttrMaxTexture2DWidth},
      {"maxTexture2D[1]", p.maxTexture2D[1], cudaDevAttrMaxTexture2DHeight},
      {"maxTexture2DMipmap[0]", p.maxTexture2DMipmap[0], cudaDevAttrMaxTexture2DMipmappedWidth},
      {"maxTexture2DMipmap[1]", p.maxTexture2DMipmap[1], cudaDevAttrMaxTexture2DMipmappedHeight},
      {"maxTexture2DLinear[0]", p.maxTexture2DLinear[0], cudaDevAttrMaxTexture2DLinearWidth},
      {"maxTexture2DLinear[1]", p.maxTexture2DLinear[1], cudaDevAttrMaxTexture2DLinearHeight},
      {"maxTexture2DLinear[2]", p.maxTexture2DLinear[2], cudaDevAttrMaxTexture2DLinearPitch},
      {"maxTexture2DGather[0]", p.maxTexture2DGather[0], cudaDevAttrMaxTexture2DGatherWidth},
      {"maxTexture2DGather[1]", p.maxTexture2DGather[1], cudaDevAttrMaxTexture2DGatherHeight},
      {"maxTexture3D[0]", p.maxTexture3D[0], cudaDevAttrMaxTexture3DWidth},
      {"maxTexture3D[1]", p.maxTexture3D[1], cudaDevAttrMaxTexture3DHeight},
      {"maxTexture3D[2]", p.maxTexture3D[2], cudaDevAttrMaxTexture3DDepth},
      {"maxTexture3DAlt[0]", p.maxTexture3DAlt[0], cudaDevAttrMaxTexture3DWidthAlt},
      {"maxTexture3DAlt[1]", p.maxTexture3DAlt[1], cudaDevAttrMaxTexture3DHeightAlt},
      {"maxTexture3DAlt[2]", p.maxTexture3DAlt[2], cudaDevAttrMaxTexture3DDepthAlt},
      {"maxTextureCubemap", p.maxTextureCubemap, cudaDevAttrMaxTextureCubemapWidth},
      {"maxTexture1DLayered[0]", p.maxTexture1DLayered[0], cudaDevAttrMaxTexture1DLayeredWidth},
      {"maxTexture1DLayered[1]", p.maxTexture1DLayered[1], cudaDevAttrMaxTexture1DLayeredLayers},
      {"maxTexture2DLayered[0]", p.maxTexture2DLayered[0], cudaDevAttrMaxTexture2DLayeredWidth},
      {"maxTexture2DLayered[1]", p.maxTexture2DLayered[1], cudaDevAttrMaxTexture2DLayeredHeight},
      {"maxTexture2DLayered[2]", p.maxTexture2DLayered[2], cudaDevAttrMaxTexture2DLayeredLayers},
      {"maxTextureCubemapLayered[0]", p.maxTextureCubemapLayered[0], cudaDevAttrMaxTextureCubemapLayeredWidth},
      {"maxTextureCubemapLayered[1]", p.maxTextureCubemapLayered[1], cudaDevAttrMaxTextureCubemapLayeredLayers},
      {"maxSurface1D", p.maxSurface1D, cudaDevAttrMaxSurface1DWidth},
      {"maxSurface2D[0]", p.maxSurface2D[0], cudaDevAttrMaxSurface2DWidth},
      {"maxSurface2D[1]", p.maxSurface2D[1], cudaDevAttrMaxSurface2DHeight},
      {"maxSurface3D[0]", p.maxSurface3D[0], cudaDevAttrMaxSurface3DWidth},
      {"maxSurface3D[1]", p.maxSurface3D[1], cudaDevAttrMaxSurface3DHeight},
      {"maxSurface3D[2]", p.maxSurface3D[2], cudaDevAttrMaxSurface3DDepth},
      {"maxSurface1DLayered[0]", p.maxSurface1DLayered[0], cudaDevAttrMaxSurface1DLayeredWidth},
      {"maxSurface1DLayered[1]", p.maxSurface1DLayered[1], cudaDevAttrMaxSurface1DLayeredLayers},
      {"maxSurface2DLayered[0]", p.maxSurface2DLayered[0], cudaDevAttrMaxSurface2DLayeredWidth},
      {"maxSurface2DLayered[1]", p.maxSurface2DLayered[1], cudaDevAttrMaxSurface2DLayeredHeight},
      {"maxSurface2DLayered[2]", p.maxSurface2DLayered[2], cudaDevAttrMaxSurface2DLayeredLayers},
      {"maxSurfaceCubemap", p.maxSurfaceCubemap, cudaDevAttrMaxSurfaceCubemapWidth},
      {"maxSurfaceCubemapLayered[0]", p.maxSurfaceCubemapLayered[0], cudaDevAttrMaxSurfaceCubemapLayeredWidth},
      {"maxSurfaceCubemapLayered[1]", p.maxSurfaceCubemapLayered[1], cudaDevAttrMaxSurfaceCubemapLayeredLayers},
      {"surfaceAlignment", static_cast<long long>(p.surfaceAlignment), cudaDevAttrSurfaceAlignment},
      {"concurrentKernels", p.concurrentKernels, cudaDevAttrConcurrentKernels},
      {"ECCEnabled", p.ECCEnabled, cudaDevAttrEccEnabled},
      {"pciBusID", p.pciBusID, cudaDevAttrPciBusId},
      {"pciDeviceID", p.pciDeviceID, cudaDevAttrPciDeviceId},
      {"pciDomainID", p.pciDomainID, cudaDevAttrPciDomainId},
      {"tccDriver", p.tccDriver, cudaDevAttrTccDriver},
      {"asyncEngineCount", p.asyncEngineCount, cudaDevAttrAsyncEngineCount},
      {"unifiedAddressing", p.unifiedAddressing, cudaDevAttrUnifiedAddressing},
      {"memoryBusWidth", p.memoryBusWidth, cudaDevAttrGlobalMemoryBusWidth},
      {"l2CacheSize", p.l2CacheSize, cudaDevAttrL2CacheSize},
      {"persistingL2CacheMaxSize", p.persistingL2CacheMaxSize, cudaDevAttrMaxPersistingL2CacheSize},
      {"maxThreadsPerMultiProcessor", p.maxThreadsPerMultiProcessor, cudaDevAttrMaxThreadsPerMultiProcessor},
      {"streamPrioritiesSupported", p.streamPrioritiesSupported, cudaDevAttrStreamPrioritiesSupported},
      {"globalL1CacheSupported", p.globalL1CacheSupported, cudaDevAttrGlobalL1CacheSupported},
      {"localL1CacheSupported", p.localL1CacheSupported, cudaDevAttrLocalL1CacheSupported},
      {"sharedMemPerMultiprocessor", static_cast<long long>(p.sharedMemPerMultiprocessor),
       cudaDevAttrMaxSharedMemoryPerMultiprocessor},
      {"regsPerMultiprocessor", p.regsPerMultiprocessor, cudaDevAttrMaxRegistersPerMultiprocessor},
      {"managedMemory", p.managedMemory, cudaDevAttrManagedMemory},
      {"isMultiGpuBoard", p.isMultiGpuBoard, cudaDevAttrIsMultiGpuBoard},
      {"multiGpuBoardGroupID", p.multiGpuBoardGroupID, cudaDevAttrMultiGpuBoardGroupID},
      {"hostNativeAtomicSupported", p.hostNativeAtomicSupported, cudaDevAttrHostNativeAtomicSupported},
      {"pageableMemoryAccess", p.pageableMemoryAccess, cudaDevAttrPageableMemoryAccess},
      {"concurrentManagedAccess", p.concurrentManagedAccess, cudaDevAttrConcurrentManagedAccess},
      {"computePreemptionSupported", p.computePreemptionSupported, cudaDevAttrComputePreemptionSupported},
      {"canUseHostPointerForRegisteredMem", p.canUseHostPointerForRegisteredMem,
       cudaDevAttrCanUseHostPointerForRegisteredMem},
      {"cooperativeLaunch", p.cooperativeLaunch, cudaDevAttrCooperativeLaunch},
      {"sharedMemPerBlockOptin", static_cast<long long>(p.sharedMemPerBlockOptin),
       cudaDevAttrMaxSharedMemoryPerBlockOptin},
      {"pageableMemoryAccessUsesHostPageTables", p.pageableMemoryAccessUsesHostPageTables,
       cudaDevAttrPageableMemoryAccessUsesHostPageTables},
      {"directManagedMemAccessFromHost", p.directManagedMemAccessFromHost, cudaDevAttrDirectManagedMemAccessFromHost},
      {"maxBlocksPerMultiProcessor", p.maxBlocksPerMultiProcessor, cudaDevAttrMaxBlocksPerMultiprocessor},
      {"accessPolicyMaxWindowSize", p.accessPolicyMaxWindowSize, cudaDevAttrMaxAccessPolicyWindowSize},
      {"reservedSharedMemPerBlock", static_cast<long long>(p.reservedSharedMemPerBlock),
       cudaDevAttrReservedSharedMemoryPerBlock},
      {"hostRegisterSupported", p.hostRegisterSupported, cudaDevAttrHostRegisterSupported},
      {"sparseCudaArraySupported", p.sparseCudaArraySupported, cudaDevAttrSparseCudaArraySupported},
      {"hostRegisterReadOnlySupported", p.hostRegisterReadOnlySupported, cudaDevAttrHostRegisterReadOnlySupported},
      {"timelineSemaphoreInteropSupported", p.timelineSemaphoreInteropSupported,
       cudaDevAttrTimelineSemaphoreInteropSupported},
      {"memoryPoolsSupported", p.memoryPoolsSupported, cudaDevAttrMemoryPoolsSupported},
      {"gpuDirectRDMASupported", p.gpuDirectRDMASupported, cudaDevAttrGPUDirectRDMASupported},
      {"gpuDirectRDMAFlushWritesOptions", p.gpuDirectRDMAFlushWritesOptions, cudaDevAttrGPUDirectRDMAFlushWritesOptions},
      {"gpuDirectRDMAWritesOrdering", p.gpuDirectRDMAWritesOrdering, cudaDevAttrGPUDirectRDMAWritesOrdering},
      {"memoryPoolSupportedHandleTypes", p.memoryPoolSupportedHandleTypes, cudaDevAttrMemoryPoolSupportedHandleTypes},
      {"deferredMappingCudaArraySupported", p.deferredMappingCudaArraySupported,
       cudaDevAttrDeferredMappingCudaArraySupported},
      {"ipcEventSupported", p.ipcEventSupported, cudaDevAttrIpcEventSupport},
      {"clusterLaunch", p.clusterLaunch, cudaDevAttrClusterLaunch},
      // CUDA 13 names attribute 129 (the driver's UNIFIED_FUNCTION_POINTERS) only as reserved.
      {"unifiedFunctionPointers", p.unifiedFunctionPointers, cudaDevAttrReserved129},
      {"deviceNumaConfig", p.deviceNumaConfig, cudaDevAttrNumaConfig},
      {"deviceNumaId", p.deviceNumaId, cudaDevAttrNumaId},
      {"mpsEnabled", p.mpsEnabled, cudaDevAttrMpsEnabled},
      {"hostNumaId", p.hostNumaId, cudaDevAttrHostNumaId},
      {"gpuPciDeviceID", static_cast<long long>(p.gpuPciDeviceID), cudaDevAttrGpuPciDeviceId},
      {"gpuPciSubsystemID", static_cast<long long>(p.gpuPciSubsystemID), cudaDevAttrGpuPciSubsystemId},
      {"hostNumaMultinodeIpcSupported", p.hostNumaMultinodeIpcSupported, cudaDevAttrHostNumaMultinodeIpcSupported},
  };
  for (const Pair& pair : pairs) {
    // Unsigned fields hold the attribute's bits: compare them as the int the attribute is.
    const long long attribute = static_cast<unsigned>(Attribute(d, pair.attribute));
    const long long field = static_cast<unsigned>(pair.value);
    Check(field == attribute, d,
          std::string("prop.") + pair.field + " = " + std::to_string(pair.value) + " but its attribute says " +
              std::to_string(static_cast<int>(attribute)));
  }
}

// Limits of the compute capability, from the CUDA C++ Programming Guide's "Technical
// Specifications per Compute Capability"; false for a capability not listed here.
bool CheckDocumentedLimits(int d, const cudaDeviceProp& p) {
  int shared_per_sm_kb = 0, optin_kb = 0;
  if (p.major == 8 && p.minor == 0) {
    shared_per_sm_kb = 164;
    optin_kb = 163;
  } else if (p.major == 9 && p.minor == 0) {
    shared_per_sm_kb = 228;
    optin_kb = 227;
  } else {
    return false;
  }
  Check(p.sharedMemPerMultiprocessor == static_cast<size_t>(shared_per_sm_kb) * 1024, d, "shared memory per SM");
  Check(p.sharedMemPerBlockOptin == static_cast<size_t>(optin_kb) * 1024, d, "opt-in shared memory per block");
  Check(p.sharedMemPerBlock == 48 * 1024, d, "48 KB of shared memory per block");
  Check(p.reservedSharedMemPerBlock == 1024, d, "1 KB of shared memory reserved per block");
  Check(p.regsPerBlock == 64 * 1024 && p.regsPerMultiprocessor == 64 * 1024, d, "64K registers per block and SM");
  Check(p.totalConstMem == 64 * 1024, d, "64 KB of constant memory");
  Check(p.maxThreadsPerMultiProcessor == 2048 && p.maxBlocksPerMultiProcessor == 32, d, "2048 threads, 32 blocks per SM");
  Check(p.maxThreadsPerBlock == 1024 && p.warpSize == 32, d, "1024 threads per block, warps of 32");
  Check(p.maxThreadsDim[0] == 1024 && p.maxThreadsDim[1] == 1024 && p.maxThreadsDim[2] == 64, d, "block extents");
  Check(p.maxGridSize[0] == 2147483647 && p.maxGridSize[1] == 65535 && p.maxGridSize[2] == 65535, d, "grid extents");
  Check(p.maxTexture1D == 131072 && p.maxTexture2D[0] == 131072 && p.maxTexture2D[1] == 65536, d, "texture extents");
  Check(p.maxTexture3D[0] == 16384 && p.maxTexture3D[1] == 16384 && p.maxTexture3D[2] == 16384, d, "3D texture extents");
  Check(p.maxTextureCubemapLayered[1] == 2046 && p.maxTexture2DLayered[2] == 2048, d, "layers");
  return true;
}

void CheckInvariants(int d, const cudaDeviceProp& p) {
  Check(std::memchr(p.name, '\0', sizeof(p.name)) != nullptr && p.name[0] != '\0', d, "a name, NUL-terminated");
  bool uuid = false;
  for (char b : p.uuid.bytes) uuid = uuid || b != 0;
  Check(uuid, d, "a UUID");
  Check(p.major >= 7, d, "compute capability 7.0 or newer");
  Check((p.gpuPciDeviceID & 0xffff) == 0x10de, d, "NVIDIA's PCI vendor id");
  Check(p.totalGlobalMem > 0, d, "global memory");
  Check(p.sharedMemPerBlock <= p.sharedMemPerBlockOptin, d, "opt-in shared memory at least the default");
  Check(p.sharedMemPerBlockOptin + p.reservedSharedMemPerBlock <= p.sharedMemPerMultiprocessor, d,
        "a block's shared memory and its reserve fit in the SM's");
  Check(p.maxThreadsPerBlock <= p.maxThreadsPerMultiProcessor, d, "a block fits on an SM");
  Check(p.warpSize > 0 && p.maxThreadsPerMultiProcessor % p.warpSize == 0, d, "whole warps per SM");
  Check(p.regsPerBlock <= p.regsPerMultiprocessor, d, "a block's registers fit on an SM");
  Check(p.persistingL2CacheMaxSize <= p.l2CacheSize, d, "the persisting L2 part of the L2");
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CUDA(d, cudaMemGetInfo(&free_bytes, &total_bytes));
  Check(free_bytes <= total_bytes && total_bytes <= p.totalGlobalMem, d, "cudaMemGetInfo within the device's memory");
  // The PCI bus id, as a string and back.
  char bus[32] = {};
  CHECK_CUDA(d, cudaDeviceGetPCIBusId(bus, sizeof(bus), d));
  unsigned domain = 0, number = 0, slot = 0, function = 9;
  Check(std::sscanf(bus, "%x:%x:%x.%x", &domain, &number, &slot, &function) == 4 && std::strlen(bus) == 12, d,
        std::string("PCI bus id ") + bus + " in the form 0000:00:00.0");
  Check(static_cast<int>(domain) == p.pciDomainID && static_cast<int>(number) == p.pciBusID &&
            static_cast<int>(slot) == p.pciDeviceID && function == 0,
        d, std::string("PCI bus id ") + bus + " names the properties' slot");
  int found = -1;
  CHECK_CUDA(d, cudaDeviceGetByPCIBusId(&found, bus));
  Check(found == d, d, std::string("cudaDeviceGetByPCIBusId(") + bus + ") finds the device");
  int least = 1, greatest = 1;
  CHECK_CUDA(d, cudaDeviceGetStreamPriorityRange(&least, &greatest));
  Check(greatest <= least, d, "stream priorities: greatest at most least");
  Check(p.streamPrioritiesSupported != 0 || (least == 0 && greatest == 0), d, "no priority range without priorities");
}

}  // namespace

int main() {
  int runtime = 0, driver = 0, count = 0;
  CHECK_CUDA(-1, cudaRuntimeGetVersion(&runtime));
  CHECK_CUDA(-1, cudaDriverGetVersion(&driver));
  CHECK_CUDA(-1, cudaGetDeviceCount(&count));
  std::printf("runtime %d, driver %d, %d device(s)\n", runtime, driver, count);
  Check(count >= 1, -1, "at least one device");
  Check(std::strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0, -1, "error names");
  std::set<std::string> uuids, buses;
  int attributes = 0;
  for (int d = 0; d < count; ++d) {
    std::printf("device %d\n", d);
    attributes = PrintAttributes(d);
    cudaDeviceProp p;
    std::memset(&p, 0xa5, sizeof(p));
    CHECK_CUDA(d, cudaGetDeviceProperties(&p, d));
    PrintProperties(p);
    CheckPropertiesAgainstAttributes(d, p);
    if (!CheckDocumentedLimits(d, p)) std::printf("  compute capability %d.%d: no documented limits here\n", p.major, p.minor);
    CheckInvariants(d, p);
    uuids.insert(std::string(p.uuid.bytes, sizeof(p.uuid.bytes)));
    buses.insert(std::to_string(p.pciDomainID) + ":" + std::to_string(p.pciBusID) + ":" + std::to_string(p.pciDeviceID));
  }
  Check(static_cast<int>(uuids.size()) == count && static_cast<int>(buses.size()) == count, -1,
        "every device its own UUID and PCI slot");
  if (g_failures != 0) {
    std::printf("device report: %d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  std::printf("device report: %d device(s), %d attributes each, all %d checks passed\n", count, attributes, g_checks);
  return 0;
}
