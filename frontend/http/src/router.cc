// Routing, request/response helpers and address parsing: the parts of the HTTP server that do not
// touch the event loop.
#include <charconv>
#include <strings.h>

#include "phos/base/strings.h"
#include "phos/http/server.h"

namespace phos::http {
namespace {

bool IsParam(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

const std::string* Request::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) return &value;
  }
  return nullptr;
}

std::string_view Request::Param(std::string_view name) const {
  for (const auto& [key, value] : params) {
    if (key == name) return value;
  }
  return {};
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

Status Router::Add(std::string method, std::string pattern, Handler handler, size_t max_body_bytes,
                   BodyLimitApplies applies) {
  if (method.empty() || pattern.empty() || pattern.front() != '/') {
    return Status::InvalidArgument("route '" + method + " " + pattern + "': pattern must start with '/'");
  }
  Route route{std::move(method), {}, std::move(handler), max_body_bytes, std::move(applies)};
  for (std::string_view segment : Split(pattern, "/", EmptyPieces::kSkip)) {
    bool has_brace = segment.find_first_of("{}") != std::string_view::npos;
    if (has_brace && !IsParam(segment)) {
      return Status::InvalidArgument("route '" + pattern + "': malformed parameter segment '" +
                                     std::string(segment) + "'");
    }
    route.segments.emplace_back(segment);
  }
  for (const Route& r : routes_) {
    if (r.method == route.method && r.segments == route.segments) {
      return Status::AlreadyExists("route '" + route.method + " " + pattern + "' is already registered");
    }
  }
  routes_.push_back(std::move(route));
  return Status::Ok();
}

Router::Match Router::Find(std::string_view method, std::string_view path) const {
  Match match;
  // Empty segments do not count: "/v1//functions/" is "/v1/functions".
  std::vector<std::string_view> parts = Split(path, "/", EmptyPieces::kSkip);
  for (const Route& route : routes_) {
    if (route.segments.size() != parts.size()) continue;
    std::vector<std::pair<std::string, std::string>> params;
    bool fits = true;
    for (size_t i = 0; i < parts.size() && fits; ++i) {
      const std::string& seg = route.segments[i];
      if (IsParam(seg)) {
        params.emplace_back(seg.substr(1, seg.size() - 2), std::string(parts[i]));
      } else {
        fits = seg == parts[i];
      }
    }
    if (!fits) continue;
    if (route.method == method) {
      match.kind = MatchKind::kFound;
      match.handler = &route.handler;
      match.params = std::move(params);
      match.max_body_bytes = route.max_body_bytes;
      if (route.body_limit_applies) match.body_limit_applies = &route.body_limit_applies;
      return match;
    }
    match.kind = MatchKind::kWrongMethod;
    if (match.allow.find(route.method) == std::string::npos) {
      match.allow += match.allow.empty() ? route.method : ", " + route.method;
    }
  }
  return match;
}

Result<std::pair<std::string, uint16_t>> ParseHostPort(std::string_view listen) {
  std::string_view host;
  std::string_view port;
  if (!listen.empty() && listen.front() == '[') {
    size_t close = listen.find(']');
    if (close == std::string_view::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return Status::InvalidArgument("listen address '" + std::string(listen) + "': expected [V6ADDR]:PORT");
    }
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    size_t colon = listen.rfind(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument("listen address '" + std::string(listen) + "': expected HOST:PORT");
    }
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return Status::InvalidArgument("listen address '" + std::string(listen) + "': bad host or port");
  }
  return std::pair<std::string, uint16_t>(std::string(host), static_cast<uint16_t>(value));
}

}  // namespace phos::http
