#include "phos/http/client.h"

#include <curl/curl.h>
#include <sys/un.h>

#include <cctype>
#include <charconv>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

namespace phos::http {
namespace {

struct BodySink {
  CURL* curl;
  const ClientRequest* request;
  std::string* body;
};

// A successful answer's body to the request's on_body when it has one, anything else gathered.
size_t Append(char* data, size_t size, size_t count, void* out) {
  auto* sink = static_cast<BodySink*>(out);
  long status = 0;
  curl_easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &status);
  if (sink->request->on_body && status >= 200 && status < 300) {
    sink->request->on_body(std::string_view(data, size * count));
    if (sink->request->keep_going && !sink->request->keep_going()) return 0;  // ends the transfer
  } else {
    sink->body->append(data, size * count);
  }
  return size * count;
}

// One "Name: value\r\n" line of the response head (the status line and the blank line are not).
size_t HeaderLine(char* data, size_t size, size_t count, void* out) {
  std::string_view line(data, size * count);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  size_t colon = line.find(':');
  if (colon != std::string_view::npos && line.rfind("HTTP/", 0) != 0) {
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    static_cast<ClientResponse*>(out)->headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  }
  return size * count;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

const std::string* ClientResponse::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoringCase(k, name)) return &v;
  }
  return nullptr;
}

Result<Endpoint> ParseEndpoint(std::string_view text) {
  constexpr std::string_view kHttp = "http://";
  constexpr std::string_view kUnix = "unix://";
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("endpoint '" + std::string(text) + "': " + why +
                                   " (expected http://HOST:PORT or unix:///PATH)");
  };
  if (text.substr(0, kUnix.size()) == kUnix) {
    const std::string_view path = text.substr(kUnix.size());
    if (path.empty() || path[0] != '/') return bad("a Unix socket's path is absolute: unix:///PATH");
    if (path.size() >= sizeof(sockaddr_un::sun_path)) return bad("the socket's path is too long");
    for (char c : path) {
      if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) return bad("a control character in the socket's path");
    }
    return Endpoint{.base_url = "http://localhost", .unix_socket = std::string(path)};
  }
  if (text.substr(0, kHttp.size()) != kHttp) return bad("not an http:// URL");
  std::string_view authority = text.substr(kHttp.size());
  if (!authority.empty() && authority.back() == '/') authority.remove_suffix(1);
  if (authority.empty()) return bad("no host");
  for (char c : authority) {
    // A path, query, user name or space would make calls' URLs something else than phosd's routes.
    if (c == '/' || c == '?' || c == '#' || c == '@' || static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return bad("only a host and a port may follow http://");
    }
  }
  // The port follows the last ':' outside an IPv6 address's brackets.
  const size_t bracket = authority.rfind(']');
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    if (colon == 0) return bad("no host");
    std::string_view port = authority.substr(colon + 1);
    unsigned number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (ec != std::errc() || end != port.data() + port.size() || number == 0 || number > 65535) {
      return bad("the port must be 1..65535");
    }
  }
  return Endpoint{.base_url = std::string(kHttp) + std::string(authority), .unix_socket = ""};
}

ErrorBody ParseErrorBody(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("error")) return {"", body};
  const nlohmann::json& e = j["error"];
  if (e.is_string()) return {"", e.get<std::string>()};
  if (e.is_object() && e.contains("message") && e["message"].is_string()) {
    return {e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "",
            e["message"].get<std::string>()};
  }
  return {"", body};
}

namespace {

// CURLOPT_XFERINFOFUNCTION: the upload's bytes to ClientRequest::on_upload_progress; nonzero (the
// transfer ends) once ClientRequest::keep_going says so.
int Progress(void* user, curl_off_t, curl_off_t, curl_off_t total, curl_off_t sent) {
  const auto& request = *static_cast<const ClientRequest*>(user);
  if (request.on_upload_progress) request.on_upload_progress(static_cast<uint64_t>(sent), static_cast<uint64_t>(total));
  return request.keep_going && !request.keep_going() ? 1 : 0;
}

}  // namespace

Result<ClientResponse> Fetch(const ClientRequest& request) {
  // curl_global_init is not thread-safe; run it once.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return Status::Internal("curl_easy_init failed");
  ClientResponse response;
  curl_slist* raw_headers = nullptr;
  for (const auto& [k, v] : request.headers) raw_headers = curl_slist_append(raw_headers, (k + ": " + v).c_str());
  // An empty Expect stops curl from waiting for "100 Continue" on large bodies.
  raw_headers = curl_slist_append(raw_headers, "Expect:");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(raw_headers, curl_slist_free_all);

  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  if (!request.unix_socket.empty()) curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, request.unix_socket.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  BodySink sink{c, &request, &response.body};
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, HeaderLine);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &response);
  if (request.method != "GET" && request.method != "HEAD") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  if (request.timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, request.timeout_ms);
  if (request.on_upload_progress || request.keep_going) {
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, Progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &request);
  }
  CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_ABORTED_BY_CALLBACK || (rc == CURLE_WRITE_ERROR && request.keep_going && !request.keep_going())) {
    return Status::Unavailable(request.method + " " + request.url + ": stopped by the caller");
  }
  if (rc != CURLE_OK) {
    return Status::Unavailable(request.method + " " + request.url + ": " + curl_easy_strerror(rc));
  }
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  return response;
}

}  // namespace phos::http
