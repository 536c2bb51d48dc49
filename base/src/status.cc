#include "phos/base/status.h"

#include <cstring>

namespace phos {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kOutOfMemory: return "OutOfMemory";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kDeviceError: return "DeviceError";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(int errno_value, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(errno_value);
  return IoError(std::move(msg));
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace phos
