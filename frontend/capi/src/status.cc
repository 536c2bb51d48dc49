// phos_status: its names, the calling thread's last error, and phosd's answers turned into it.
#include <array>
#include <string>
#include <string_view>


#include "client.h"
#include "phos/base/version.h"

namespace phos::capi {
namespace {

// Indexed by phos_status.
constexpr std::array<const char*, 14> kStatusNames = {
    "PHOS_OK",
    "PHOS_INVALID_ARGUMENT",
    "PHOS_NOT_FOUND",
    "PHOS_ALREADY_EXISTS",
    "PHOS_FAILED_PRECONDITION",
    "PHOS_UNAVAILABLE",
    "PHOS_UNAUTHENTICATED",
    "PHOS_PERMISSION_DENIED",
    "PHOS_TIMEOUT",
    "PHOS_FUNCTION_ERROR",
    "PHOS_INSTANCE_LOST",
    "PHOS_TOO_MANY_REQUESTS",
    "PHOS_NOT_SUPPORTED",
    "PHOS_INTERNAL",
};
static_assert(kStatusNames.size() == PHOS_INTERNAL + 1, "a name for every phos_status");

// The calling thread's last error: a message of its own, or (`fixed`, when memory ran out) one
// that lives as long as the process.
struct LastError {
  std::string message;
  const char* fixed = nullptr;
};
thread_local LastError t_last_error;

// The codes of phosd's error bodies (docs/design.md, "Interfaces") and their statuses. "conflict"
// is not here: its meaning depends on the route (FromHttpStatus).
struct CodeMeaning {
  std::string_view code;
  phos_status status;
};
constexpr CodeMeaning kCodeMeanings[] = {
    {"invalid_argument", PHOS_INVALID_ARGUMENT},
    {"method_not_allowed", PHOS_INVALID_ARGUMENT},
    {"payload_too_large", PHOS_INVALID_ARGUMENT},
    {"headers_too_large", PHOS_INVALID_ARGUMENT},
    {"unauthenticated", PHOS_UNAUTHENTICATED},
    {"permission_denied", PHOS_PERMISSION_DENIED},
    {"not_found", PHOS_NOT_FOUND},
    {"already_exists", PHOS_ALREADY_EXISTS},
    {"precondition_failed", PHOS_FAILED_PRECONDITION},
    {"too_many_requests", PHOS_TOO_MANY_REQUESTS},
    {"function_error", PHOS_FUNCTION_ERROR},
    {"deploy_failed", PHOS_FUNCTION_ERROR},  // the function failed before its entry point
    {"instance_lost", PHOS_INSTANCE_LOST},
    {"internal", PHOS_INTERNAL},
    {"not_implemented", PHOS_NOT_SUPPORTED},
    {"unavailable", PHOS_UNAVAILABLE},
    {"timeout", PHOS_TIMEOUT},
};

// The status of error code `code`, or PHOS_OK when this version knows none.
phos_status FromCode(std::string_view code) {
  for (const CodeMeaning& m : kCodeMeanings) {
    if (m.code == code) return m.status;
  }
  return PHOS_OK;
}

// The status of each HTTP status phosd answers (README, "HTTP"; frontend/phosd/routes.cc), but
// for those whose meaning depends on the route (FromHttpStatus).
struct HttpStatusMeaning {
  int http;
  phos_status status;
};
constexpr HttpStatusMeaning kHttpStatusMeanings[] = {
    {400, PHOS_INVALID_ARGUMENT},
    {401, PHOS_UNAUTHENTICATED},
    {403, PHOS_PERMISSION_DENIED},
    {404, PHOS_NOT_FOUND},
    {412, PHOS_FAILED_PRECONDITION},
    {429, PHOS_TOO_MANY_REQUESTS},
    {500, PHOS_INTERNAL},
    {501, PHOS_NOT_SUPPORTED},
    {502, PHOS_INSTANCE_LOST},
    {503, PHOS_UNAVAILABLE},
    {504, PHOS_TIMEOUT},
};

phos_status FromHttpStatus(int status, Route route) {
  // A function's own refusal (400: its request was bad) or failure (500) on invoke; a bad header
  // would be 400 too, which is why phos_invoke checks its options before sending them.
  if (route == Route::kInvoke && (status == 400 || status == 500)) return PHOS_FUNCTION_ERROR;
  // A name taken on deploy; elsewhere a state the call cannot run in (a snapshot's layout).
  if (status == 409) return route == Route::kDeploy ? PHOS_ALREADY_EXISTS : PHOS_FAILED_PRECONDITION;
  for (const HttpStatusMeaning& m : kHttpStatusMeanings) {
    if (m.http == status) return m.status;
  }
  // 413 (a body over --max-body-mib) and the other refusals of what was sent.
  if (status >= 400 && status < 500) return PHOS_INVALID_ARGUMENT;
  return PHOS_INTERNAL;
}

// A body that is not JSON (a proxy's page, say) is quoted up to here in the message.
constexpr size_t kMaxQuotedBody = 512;

}  // namespace

phos_status Fail(phos_status status, std::string message) noexcept {
  t_last_error.message.swap(message);
  t_last_error.fixed = nullptr;
  return status;
}

phos_status FailStatic(phos_status status, const char* message) noexcept {
  t_last_error.fixed = message;
  return status;
}

phos_status FailFromAnswer(const http::ClientResponse& answer, Route route, std::string_view what) {
  http::ErrorBody error = http::ParseErrorBody(answer.body);
  std::string message = error.message.substr(0, kMaxQuotedBody);
  phos_status status = FromCode(error.code);
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r' || message.back() == ' ')) {
    message.pop_back();
  }
  if (status == PHOS_OK) status = FromHttpStatus(answer.status, route);
  std::string text(what);
  text += ": ";
  text += message.empty() ? "no reason given" : message;
  text += " (HTTP " + std::to_string(answer.status) + ")";
  return Fail(status, std::move(text));
}

}  // namespace phos::capi

using phos::capi::kStatusNames;

extern "C" {

int phos_api_version(void) {
  return PHOS_API_VERSION;
}

const char* phos_version(void) {
  return phos::kVersion;
}

const char* phos_status_name(phos_status status) {
  const auto i = static_cast<size_t>(status);
  return i < kStatusNames.size() ? kStatusNames[i] : "PHOS_UNKNOWN_STATUS";
}

const char* phos_last_error(void) {
  const auto& last = phos::capi::t_last_error;
  return last.fixed != nullptr ? last.fixed : last.message.c_str();
}

}  // extern "C"
