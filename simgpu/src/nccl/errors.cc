#include "nccl/errors.h"

#include "phos/base/log.h"

namespace phos::sim::nccl {
namespace {

thread_local std::string last_error;

const char* ResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "unknown ncclResult_t";
  }
}

}  // namespace

ncclResult_t Fail(ncclResult_t result, const std::string& message) {
  PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "nccl: {}: {}", message, ResultName(result));
  last_error = message;
  return result;
}

const char* LastError() {
  return last_error.c_str();
}

// The texts of NCCL 2.28's ncclGetErrorString.
const char* ResultString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

}  // namespace phos::sim::nccl
