// A small blocking HTTP client over libcurl, for phos-fn and the integration tests.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::http {

struct ClientResponse {
  int status = 0;
  std::string body;
  // Response headers as received (names in the server's case), in order.
  std::vector<std::pair<std::string, std::string>> headers;
  // The first header named `name` (case-insensitive), or null.
  const std::string* Header(std::string_view name) const;
};

struct ClientRequest {
  std::string method = "GET";
  std::string url;  // "http://127.0.0.1:7070/v1/functions"
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Whole-transfer limit; 0 waits for ever. Default: 0.
  long timeout_ms = 0;
  // When set, the body of a successful (2xx) answer goes here piece by piece as it arrives (an
  // answer sent in chunks: each as soon as it came) instead of into ClientResponse::body.
  std::function<void(std::string_view)> on_body;
};

// What an error answer of phosd says: {"error": {"code": "...", "message": "..."}}; also the older
// {"error": "..."} (no code). A body of neither shape is the message as it is, with no code.
struct ErrorBody {
  std::string code;
  std::string message;
};
ErrorBody ParseErrorBody(const std::string& body);

// Performs one request. Fails (Unavailable) only when no HTTP answer arrived: connection refused,
// reset, timed out; any HTTP status, 4xx and 5xx included, is a successful result.
Result<ClientResponse> Fetch(const ClientRequest& request);

}  // namespace phos::http
