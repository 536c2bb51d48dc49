// The requests of one HTTP/1.1 connection, parsed from its bytes as they arrive (the Debian
// http-parser underneath): request line, headers, Content-Length and chunked bodies, under the
// server's header and body limits. The server feeds it what each read returns; it touches no
// socket, so the fuzz target (tests/fuzz/http_request_fuzz.cc) feeds it the same way.
//
//   RequestParser parser({.max_header_bytes = 16 << 10, .max_body_bytes = 1 << 20});
//   std::vector<ParsedRequest> requests;
//   int error = parser.Feed(bytes.data(), bytes.size(), &requests);  // 0, or 400 / 413 / 431
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "phos/http/server.h"

namespace phos::http {

struct ParsedRequest {
  Request request;  // method, path, query, headers and body; no params (the router sets those)
  bool keep_alive = true;
};

class RequestParser {
 public:
  struct Limits {
    size_t max_header_bytes = 16 * 1024;         // request line plus headers; more is 431
    size_t max_body_bytes = 64 * 1024 * 1024;    // after de-chunking; more is 413
    // The body limit of one request by its request line and headers (`head`: no body yet), in
    // place of max_body_bytes; 0 keeps max_body_bytes. Unset: max_body_bytes for every request.
    std::function<size_t(const Request& head)> body_limit_for;
  };
  explicit RequestParser(Limits limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses `len` more bytes of the connection; each request they complete is appended to *out.
  // Returns 0 while the bytes are well-formed, else the status to answer before closing (400,
  // 413 or 431): the parser then takes nothing more. Nothing after a request that does not keep
  // the connection alive is parsed (stopped() turns true).
  int Feed(const char* data, size_t len, std::vector<ParsedRequest>* out);
  // True once an error or a last request ended the connection's requests.
  bool stopped() const;
  // What the parser refused, for logs ("invalid HTTP method"); "" when nothing was.
  const char* error_description() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace phos::http
