// Opening and closing a client, and the one way every call reaches phosd.
#include "client.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace phos::capi {
namespace {


// A healthy phosd answers /healthz from its event loop at once; this only bounds how long
// phos_connect waits on a host that drops packets instead of refusing the connection.
constexpr long kHealthDeadlineMs = 10000;

// Checks `endpoint` (http::ParseEndpoint: "http://HOST:PORT" or "unix:///PATH").
phos_status ParseEndpoint(const char* endpoint, http::Endpoint* out) {
  if (endpoint == nullptr) return FailStatic(PHOS_INVALID_ARGUMENT, "phos_connect: endpoint is NULL");
  Result<http::Endpoint> parsed = http::ParseEndpoint(endpoint);
  if (!parsed.ok()) return Fail(PHOS_INVALID_ARGUMENT, parsed.status().message());
  *out = std::move(parsed).value();
  return PHOS_OK;
}

// A token goes into a header line: one word of printable characters, as phosd's token files hold.
phos_status CheckToken(const char* token) {
  if (token == nullptr) return PHOS_OK;
  for (const char* c = token; *c != '\0'; ++c) {
    if (static_cast<unsigned char>(*c) <= ' ' || *c == 0x7f) {
      return FailStatic(PHOS_INVALID_ARGUMENT, "phos_connect: a token is one word of printable characters");
    }
  }
  return PHOS_OK;
}

}  // namespace

phos_status Call(const phos_client& client, http::ClientRequest request, Route route, std::string_view what,
                 http::ClientResponse* answer) {
  request.url = client.endpoint.base_url + request.url;
  request.unix_socket = client.endpoint.unix_socket;
  if (!client.token.empty()) request.headers.emplace_back("Authorization", "Bearer " + client.token);
  Result<http::ClientResponse> got = http::Fetch(request);
  if (!got.ok()) return Fail(PHOS_UNAVAILABLE, std::string(what) + ": " + got.status().message());
  if (got->status < 200 || got->status >= 300) return FailFromAnswer(*got, route, what);
  *answer = std::move(got).value();
  return PHOS_OK;
}

char* CopyString(std::string_view text) {
  auto* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return nullptr;
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  return copy;
}

phos_status ReturnString(std::string_view text, char** out) {
  *out = CopyString(text);
  return *out != nullptr ? PHOS_OK : FailStatic(PHOS_INTERNAL, "out of memory");
}

phos_status CheckName(const char* name) {
  if (name == nullptr) return FailStatic(PHOS_INVALID_ARGUMENT, "the function name is NULL");
  std::string_view text(name);
  bool ok = !text.empty() && text != "." && text != "..";
  for (char c : text) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '.');
  }
  if (ok) return PHOS_OK;
  return Fail(PHOS_INVALID_ARGUMENT, "function name '" + std::string(text) +
                                         "': use letters, digits, '_', '-' and '.' (not '.' or '..')");
}

phos_status CheckStructSize(size_t struct_size, size_t first_size, const char* what) {
  if (struct_size >= first_size) return PHOS_OK;
  return Fail(PHOS_INVALID_ARGUMENT, std::string(what) + ".struct_size is " + std::to_string(struct_size) +
                                         ", less than the " + std::to_string(first_size) +
                                         " bytes of its first version: set it to sizeof(" + what + ")");
}

phos_status CheckNotNull(const void* pointer, const char* what) {
  if (pointer != nullptr) return PHOS_OK;
  return Fail(PHOS_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

}  // namespace phos::capi

using phos::capi::Call;
using phos::capi::CheckNotNull;
using phos::capi::Guard;
using phos::capi::Route;

extern "C" {

phos_status phos_connect(const char* endpoint, const char* token, phos_client** out) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(out, "phos_connect: out"); s != PHOS_OK) return s;
    *out = nullptr;
    auto client = std::make_unique<phos_client>();
    if (phos_status s = phos::capi::ParseEndpoint(endpoint, &client->endpoint); s != PHOS_OK) return s;
    client->endpoint_text = endpoint;
    if (phos_status s = phos::capi::CheckToken(token); s != PHOS_OK) return s;
    client->token = token != nullptr ? token : "";
    phos::http::ClientResponse health;
    phos_status s = Call(*client, {.url = "/healthz", .timeout_ms = phos::capi::kHealthDeadlineMs},
                         Route::kOther, "phosd at " + client->endpoint_text, &health);
    if (s != PHOS_OK) return s;
    *out = client.release();
    return PHOS_OK;
  });
}

phos_status phos_close(phos_client* client) {
  delete client;
  return PHOS_OK;
}

void phos_free(void* memory) {
  std::free(memory);
}

}  // extern "C"
