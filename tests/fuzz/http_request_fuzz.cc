// HTTP request parsing and routing (frontend/http): the bytes a client sends, split into reads
// where the input says, go through the connection's RequestParser; every request it completes is
// routed by a Router holding phosd's route patterns. Also the listen-address parser.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "phos/http/request_parser.h"
#include "phos/http/server.h"

namespace {

using namespace phos::http;

const Router& PhosdRoutes() {
  static const Router* router = [] {
    auto* r = new Router;
    const char* routes[][2] = {
        {"GET", "/healthz"},
        {"GET", "/metrics"},
        {"POST", "/v1/functions"},
        {"GET", "/v1/functions"},
        {"DELETE", "/v1/functions/{name}"},
        {"POST", "/v1/functions/{name}/invoke"},
        {"POST", "/v1/sessions"},
    };
    for (const auto& [method, pattern] : routes) {
      if (!r->Add(method, pattern, [](Request, Responder) {}).ok()) std::abort();
    }
    return r;
  }();
  return *router;
}

void Route(const ParsedRequest& parsed) {
  const Request& r = parsed.request;
  Router::Match match = PhosdRoutes().Find(r.method, r.path);
  switch (match.kind) {
    case Router::MatchKind::kFound:
      if (match.handler == nullptr) std::abort();
      for (const auto& [name, value] : match.params) {
        // A parameter matches one whole, non-empty segment.
        if (value.empty() || value.find('/') != std::string::npos) std::abort();
      }
      break;
    case Router::MatchKind::kWrongMethod:
      if (match.allow.empty()) std::abort();
      break;
    case Router::MatchKind::kNoRoute:
      break;
  }
  (void)r.Header("content-length");
  (void)r.Header("Authorization");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  phos::fuzz::FuzzInput in(data, size);
  // Small limits, so that short inputs reach the 413 and 431 checks.
  const size_t max_header = 64 + in.Take<uint8_t>() * 16u;
  const size_t max_body = in.Take<uint16_t>();
  const size_t read_size = 1 + in.Take<uint8_t>();  // bytes per simulated socket read
  auto bytes = in.Rest();
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  (void)ParseHostPort(text);

  RequestParser parser({.max_header_bytes = max_header, .max_body_bytes = max_body});
  std::vector<ParsedRequest> requests;
  for (size_t pos = 0; pos < bytes.size(); pos += read_size) {
    const size_t n = std::min(read_size, bytes.size() - pos);
    const int status = parser.Feed(reinterpret_cast<const char*>(bytes.data()) + pos, n, &requests);
    if (status != 0 && status != 400 && status != 413 && status != 431) std::abort();
    if (status != 0) {
      if (!parser.stopped()) std::abort();
      break;
    }
  }
  for (const ParsedRequest& r : requests) {
    if (r.request.body.size() > max_body) std::abort();
    Route(r);
  }
  return 0;
}
