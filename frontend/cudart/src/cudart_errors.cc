// cudaGetErrorName and cudaGetErrorString: every cudaError_t of the CUDA 13 headers, with the
// name and text NVIDIA's runtime gives it (frontend_test compares the two libraries value by value).
#include "cudart_internal.h"

namespace {

struct ErrorName {
  cudaError_t error;
  const char* name;
  const char* text;
};

#define PHOS_ERR(e, text) \
  { e, #e, text }
constexpr ErrorName kErrors[] = {
    PHOS_ERR(cudaSuccess, "no error"),
    PHOS_ERR(cudaErrorInvalidValue, "invalid argument"),
    PHOS_ERR(cudaErrorMemoryAllocation, "out of memory"),
    PHOS_ERR(cudaErrorInitializationError, "initialization error"),
    PHOS_ERR(cudaErrorCudartUnloading, "driver shutting down"),
    PHOS_ERR(cudaErrorProfilerDisabled, "profiler disabled while using external profiling tool"),
    PHOS_ERR(cudaErrorProfilerNotInitialized, "profiler not initialized: call cudaProfilerInitialize()"),
    PHOS_ERR(cudaErrorProfilerAlreadyStarted, "profiler already started"),
    PHOS_ERR(cudaErrorProfilerAlreadyStopped, "profiler already stopped"),
    PHOS_ERR(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    PHOS_ERR(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    PHOS_ERR(cudaErrorInvalidSymbol, "invalid device symbol"),
    PHOS_ERR(cudaErrorInvalidHostPointer, "invalid host pointer"),
    PHOS_ERR(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    PHOS_ERR(cudaErrorInvalidTexture, "invalid texture reference"),
    PHOS_ERR(cudaErrorInvalidTextureBinding, "texture is not bound to a pointer"),
    PHOS_ERR(cudaErrorInvalidChannelDescriptor, "invalid channel descriptor"),
    PHOS_ERR(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    PHOS_ERR(cudaErrorAddressOfConstant, "invalid address of constant"),
    PHOS_ERR(cudaErrorTextureFetchFailed, "fetch from texture failed"),
    PHOS_ERR(cudaErrorTextureNotBound, "cannot fetch from a texture that is not bound"),
    PHOS_ERR(cudaErrorSynchronizationError, "incorrect use of __syncthreads()"),
    PHOS_ERR(cudaErrorInvalidFilterSetting, "linear filtering not supported for non-float type"),
    PHOS_ERR(cudaErrorInvalidNormSetting, "read as normalized float not supported for data type"),
    PHOS_ERR(cudaErrorMixedDeviceExecution,
             "device emulation mode and device execution mode cannot be mixed"),
    PHOS_ERR(cudaErrorNotYetImplemented, "feature not yet implemented"),
    PHOS_ERR(cudaErrorMemoryValueTooLarge, "memory size or pointer value too large to fit in 32 bit"),
    PHOS_ERR(cudaErrorStubLibrary, "CUDA driver is a stub library"),
    PHOS_ERR(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    PHOS_ERR(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver"),
    PHOS_ERR(cudaErrorInvalidSurface, "invalid surface reference"),
    PHOS_ERR(cudaErrorDuplicateVariableName, "duplicate global variable looked up by string name"),
    PHOS_ERR(cudaErrorDuplicateTextureName, "duplicate texture looked up by string name"),
    PHOS_ERR(cudaErrorDuplicateSurfaceName, "duplicate surface looked up by string name"),
    PHOS_ERR(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"),
    PHOS_ERR(cudaErrorIncompatibleDriverContext, "incompatible driver context"),
    PHOS_ERR(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
    PHOS_ERR(cudaErrorPriorLaunchFailure, "unspecified launch failure in prior launch"),
    PHOS_ERR(cudaErrorLaunchMaxDepthExceeded, "launch would exceed maximum depth of nested launches"),
    PHOS_ERR(cudaErrorLaunchFileScopedTex,
             "launch failed because kernel uses unsupported, file-scoped textures (texture objects are "
             "supported)"),
    PHOS_ERR(cudaErrorLaunchFileScopedSurf,
             "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are "
             "supported)"),
    PHOS_ERR(cudaErrorSyncDepthExceeded,
             "cudaDeviceSynchronize failed because caller's grid depth exceeds cudaLimitDevRuntimeSyncDepth"),
    PHOS_ERR(cudaErrorLaunchPendingCountExceeded,
             "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount"),
    PHOS_ERR(cudaErrorInvalidDeviceFunction, "invalid device function"),
    PHOS_ERR(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    PHOS_ERR(cudaErrorInvalidDevice, "invalid device ordinal"),
    PHOS_ERR(cudaErrorDeviceNotLicensed, "device doesn't have valid Grid license"),
    PHOS_ERR(cudaErrorSoftwareValidityNotEstablished, "integrity checks failed"),
    PHOS_ERR(cudaErrorStartupFailure, "startup failure in cuda runtime"),
    PHOS_ERR(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    PHOS_ERR(cudaErrorDeviceUninitialized, "invalid device context"),
    PHOS_ERR(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed"),
    PHOS_ERR(cudaErrorUnmapBufferObjectFailed, "unmapping of buffer object failed"),
    PHOS_ERR(cudaErrorArrayIsMapped, "array is mapped"),
    PHOS_ERR(cudaErrorAlreadyMapped, "resource already mapped"),
    PHOS_ERR(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"),
    PHOS_ERR(cudaErrorAlreadyAcquired, "resource already acquired"),
    PHOS_ERR(cudaErrorNotMapped, "resource not mapped"),
    PHOS_ERR(cudaErrorNotMappedAsArray, "resource not mapped as array"),
    PHOS_ERR(cudaErrorNotMappedAsPointer, "resource not mapped as pointer"),
    PHOS_ERR(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered"),
    PHOS_ERR(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
    PHOS_ERR(cudaErrorDeviceAlreadyInUse, "exclusive-thread device already in use by a different thread"),
    PHOS_ERR(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices"),
    PHOS_ERR(cudaErrorInvalidPtx, "a PTX JIT compilation failed"),
    PHOS_ERR(cudaErrorInvalidGraphicsContext, "invalid OpenGL or DirectX context"),
    PHOS_ERR(cudaErrorNvlinkUncorrectable, "uncorrectable NVLink error detected during the execution"),
    PHOS_ERR(cudaErrorJitCompilerNotFound, "PTX JIT compiler library not found"),
    PHOS_ERR(cudaErrorUnsupportedPtxVersion, "the provided PTX was compiled with an unsupported toolchain."),
    PHOS_ERR(cudaErrorJitCompilationDisabled, "PTX JIT compilation was disabled"),
    PHOS_ERR(cudaErrorUnsupportedExecAffinity, "the provided execution affinity is not supported"),
    PHOS_ERR(cudaErrorUnsupportedDevSideSync,
             "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    PHOS_ERR(cudaErrorContained, "Invalid access of peer GPU memory over nvlink or a hardware error"),
    PHOS_ERR(cudaErrorInvalidSource, "device kernel image is invalid"),
    PHOS_ERR(cudaErrorFileNotFound, "file not found"),
    PHOS_ERR(cudaErrorSharedObjectSymbolNotFound, "shared object symbol not found"),
    PHOS_ERR(cudaErrorSharedObjectInitFailed, "shared object initialization failed"),
    PHOS_ERR(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS"),
    PHOS_ERR(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    PHOS_ERR(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    PHOS_ERR(cudaErrorLossyQuery, "attempted introspection would be semantically lossy"),
    PHOS_ERR(cudaErrorSymbolNotFound, "named symbol not found"),
    PHOS_ERR(cudaErrorNotReady, "device not ready"),
    PHOS_ERR(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    PHOS_ERR(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    PHOS_ERR(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    PHOS_ERR(cudaErrorLaunchIncompatibleTexturing, "launch uses incompatible texturing mode"),
    PHOS_ERR(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
    PHOS_ERR(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
    PHOS_ERR(cudaErrorSetOnActiveProcess, "cannot set while device is active in this process"),
    PHOS_ERR(cudaErrorContextIsDestroyed, "context is destroyed"),
    PHOS_ERR(cudaErrorAssert, "device-side assert triggered"),
    PHOS_ERR(cudaErrorTooManyPeers, "peer mapping resources exhausted"),
    PHOS_ERR(cudaErrorHostMemoryAlreadyRegistered,
             "part or all of the requested memory range is already mapped"),
    PHOS_ERR(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    PHOS_ERR(cudaErrorHardwareStackError, "hardware stack error"),
    PHOS_ERR(cudaErrorIllegalInstruction, "an illegal instruction was encountered"),
    PHOS_ERR(cudaErrorMisalignedAddress, "misaligned address"),
    PHOS_ERR(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space"),
    PHOS_ERR(cudaErrorInvalidPc, "invalid program counter"),
    PHOS_ERR(cudaErrorLaunchFailure, "unspecified launch failure"),
    PHOS_ERR(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch"),
    PHOS_ERR(cudaErrorTensorMemoryLeak, "tensor memory not completely freed"),
    PHOS_ERR(cudaErrorNotPermitted, "operation not permitted"),
    PHOS_ERR(cudaErrorNotSupported, "operation not supported"),
    PHOS_ERR(cudaErrorSystemNotReady, "system not yet initialized"),
    PHOS_ERR(cudaErrorSystemDriverMismatch,
             "system has unsupported display driver / cuda driver combination"),
    PHOS_ERR(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW"),
    PHOS_ERR(cudaErrorMpsConnectionFailed,
             "MPS client failed to connect to the MPS control daemon or the MPS server"),
    PHOS_ERR(cudaErrorMpsRpcFailure,
             "the remote procedural call between the MPS server and the MPS client failed"),
    PHOS_ERR(cudaErrorMpsServerNotReady, "MPS server is not ready to accept new MPS client requests"),
    PHOS_ERR(cudaErrorMpsMaxClientsReached,
             "the hardware resources required to create MPS client have been exhausted"),
    PHOS_ERR(cudaErrorMpsMaxConnectionsReached,
             "the hardware resources required to support device connections have been exhausted"),
    PHOS_ERR(cudaErrorMpsClientTerminated, "the MPS client has been terminated by the server"),
    PHOS_ERR(
        cudaErrorCdpNotSupported,
        "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it"),
    PHOS_ERR(cudaErrorCdpVersionMismatch,
             "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    PHOS_ERR(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
    PHOS_ERR(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture"),
    PHOS_ERR(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences"),
    PHOS_ERR(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began"),
    PHOS_ERR(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
    PHOS_ERR(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream"),
    PHOS_ERR(cudaErrorStreamCaptureImplicit,
             "operation would make the legacy stream depend on a capturing blocking stream"),
    PHOS_ERR(cudaErrorCapturedEvent,
             "operation not permitted on an event last recorded in a capturing stream"),
    PHOS_ERR(cudaErrorStreamCaptureWrongThread,
             "attempt to terminate a thread-local capture sequence from another thread"),
    PHOS_ERR(cudaErrorTimeout, "wait operation timed out"),
    PHOS_ERR(cudaErrorGraphExecUpdateFailure,
             "the graph update was not performed because it included changes which violated constraints "
             "specific to instantiated graph update"),
    PHOS_ERR(cudaErrorExternalDevice, "an async error has occured in external entity outside of CUDA"),
    PHOS_ERR(cudaErrorInvalidClusterSize,
             "a kernel launch error has occurred due to cluster misconfiguration"),
    PHOS_ERR(cudaErrorFunctionNotLoaded,
             "the function handle is not loaded when calling an API that requires a loaded function"),
    PHOS_ERR(cudaErrorInvalidResourceType,
             "one or more resources passed in are not valid resource types for the operation"),
    PHOS_ERR(cudaErrorInvalidResourceConfiguration,
             "one or more resources are insufficient or non-applicable for the operation"),
    PHOS_ERR(cudaErrorUnknown, "unknown error"),
    PHOS_ERR(cudaErrorApiFailureBase, "api failure base"),
};
#undef PHOS_ERR

// NVIDIA's answer, name and text alike, for a value that is no cudaError_t.
constexpr const char* kUnrecognized = "unrecognized error code";

const ErrorName* FindError(cudaError_t error) {
  for (const ErrorName& e : kErrors) {
    if (e.error == error) return &e;
  }
  return nullptr;
}

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorName* e = FindError(error);
  return e != nullptr ? e->name : kUnrecognized;
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorName* e = FindError(error);
  return e != nullptr ? e->text : kUnrecognized;
}

}  // extern "C"
