// phosd's error answers, one shape for every route, the access policy and the HTTP server's own
// errors: {"error": {"code": "<stable code>", "message": "<what went wrong>"}}. Clients branch on
// the code (docs/design.md "Interfaces" lists them); the message is for people and may change.
#pragma once

#include <string>
#include <string_view>

#include "phos/http/server.h"

namespace phos::phosd {

// The code an error answer of HTTP `status` carries unless its route names a finer one:
// invalid_argument (400), unauthenticated (401), permission_denied (403), not_found (404),
// method_not_allowed (405), conflict (409), precondition_failed (412), payload_too_large (413),
// too_many_requests (429), headers_too_large (431), internal (500), not_implemented (501),
// instance_lost (502), unavailable (503), timeout (504); "http_<status>" for any other.
std::string ErrorCode(int status);

// The error answer: `code` when given (a finer one: already_exists, function_error), else
// ErrorCode(status).
http::Response ErrorResponse(int status, const std::string& message, std::string_view code = {});

}  // namespace phos::phosd
