// A small blocking HTTP client over libcurl, for phos-fn and the integration tests.
#pragma once

#include <cstdint>
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

// Where a client reaches phosd, as a user writes it: "http://HOST:PORT" (a trailing '/'
// allowed), or "unix:///PATH" for phosd's Unix socket (ServerOptions::unix_socket).
struct Endpoint {
  std::string base_url;     // request paths are appended to it: "http://HOST:PORT", or
                            // "http://localhost" on a Unix socket
  std::string unix_socket;  // the socket's path; empty over TCP
};
// Refuses (InvalidArgument, saying what is expected) anything else: another scheme, a path, query
// or user after the host, a port outside 1..65535, a relative or over-long socket path.
Result<Endpoint> ParseEndpoint(std::string_view text);

struct ClientRequest {
  std::string method = "GET";
  std::string url;  // "http://127.0.0.1:7070/v1/functions"
  // The Unix socket to send it over (Endpoint::unix_socket); empty: TCP to the URL's host.
  std::string unix_socket;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Whole-transfer limit; 0 waits for ever. Default: 0.
  long timeout_ms = 0;
  // When set, the body of a successful (2xx) answer goes here piece by piece as it arrives (an
  // answer sent in chunks: each as soon as it came) instead of into ClientResponse::body.
  std::function<void(std::string_view)> on_body;
  // When set, told the request body's bytes sent so far and in all, as the upload goes (several
  // times a second at most, from the calling thread).
  std::function<void(uint64_t sent, uint64_t total)> on_upload_progress;
  // When set, asked with each piece of the answer and about once a second meanwhile: false ends
  // the transfer there (Fetch fails, Unavailable, saying it was stopped). For answers that stream
  // for as long as the client listens.
  std::function<bool()> keep_going;
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
