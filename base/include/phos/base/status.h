// Status and Result<T>: how every phos component reports failure. No exceptions cross a
// component boundary; each layer adds context with WithContext() ("restore fn 'mlp': load chunk
// 3f2a…: checksum mismatch").
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace phos {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller passed something malformed
  kNotFound,           // a named thing does not exist
  kAlreadyExists,      // a named thing exists and may not be replaced
  kOutOfMemory,        // device or host memory is exhausted
  kFailedPrecondition, // the system is not in a state where the call can run
  kCorruption,         // stored data failed a check
  kIoError,            // the operating system refused an I/O operation
  kUnavailable,        // a peer or resource is temporarily unreachable
  kNotSupported,       // the operation is not implemented for this configuration
  kDeviceError,        // the CUDA driver (or simgpu) returned an error
  kTimeout,            // a deadline passed
  kInternal,           // an invariant of phos itself was broken
};

// The name of a code, e.g. "InvalidArgument".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {StatusCode::kAlreadyExists, std::move(msg)}; }
  static Status OutOfMemory(std::string msg) { return {StatusCode::kOutOfMemory, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) { return {StatusCode::kFailedPrecondition, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status NotSupported(std::string msg) { return {StatusCode::kNotSupported, std::move(msg)}; }
  static Status DeviceError(std::string msg) { return {StatusCode::kDeviceError, std::move(msg)}; }
  static Status Timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  // An I/O error carrying strerror(errno_value).
  static Status FromErrno(int errno_value, std::string_view what);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message" with the same code; OK stays OK.
  Status WithContext(std::string_view context) const;
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;

  // Marks a status as deliberately not acted on.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "a Result built from a Status must carry an error");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error, or OK when there is a value.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace phos

#define PHOS_STATUS_CONCAT_INNER(a, b) a##b
#define PHOS_STATUS_CONCAT(a, b) PHOS_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define PHOS_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::phos::Status phos_status_ = (expr);           \
    if (!phos_status_.ok()) return phos_status_;    \
  } while (0)

// `lhs = value of expr`, or returns its status from the enclosing function.
#define PHOS_ASSIGN_OR_RETURN(lhs, expr) \
  PHOS_ASSIGN_OR_RETURN_IMPL(PHOS_STATUS_CONCAT(phos_result_, __LINE__), lhs, expr)
#define PHOS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
