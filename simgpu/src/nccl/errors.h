// Failure reporting of simgpu's NCCL calls: a rate-limited log line, and the same text kept per
// thread for ncclGetLastError.
#pragma once

#include <nccl.h>

#include <string>

namespace phos::sim::nccl {

// Logs "<message>: <result name>" and records it for ncclGetLastError; returns `result`.
ncclResult_t Fail(ncclResult_t result, const std::string& message);
// The calling thread's last recorded failure, "" when none.
const char* LastError();
// ncclGetErrorString's text for `result`.
const char* ResultString(ncclResult_t result);

}  // namespace phos::sim::nccl
