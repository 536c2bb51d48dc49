#include "errors.h"

#include <nlohmann/json.hpp>

namespace phos::phosd {

std::string ErrorCode(int status) {
  switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 409: return "conflict";
    case 412: return "precondition_failed";
    case 413: return "payload_too_large";
    case 429: return "too_many_requests";
    case 431: return "headers_too_large";
    case 500: return "internal";
    case 501: return "not_implemented";
    case 502: return "instance_lost";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return "http_" + std::to_string(status);
  }
}

http::Response ErrorResponse(int status, const std::string& message, std::string_view code) {
  const nlohmann::json body = {
      {"error", {{"code", code.empty() ? ErrorCode(status) : std::string(code)}, {"message", message}}}};
  return http::Response::Json(status, body.dump() + "\n");
}

}  // namespace phos::phosd
