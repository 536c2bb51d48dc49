// What the C API's sources share: the client handle, phosd's answers turned into a phos_status
// and the calling thread's last error, and the checks every entry point makes of its arguments.
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "phos.h"
#include "phos/http/client.h"

// The handle behind phos_client*. Fixed once phos_connect returns, so calls from many threads read
// it without a lock; each call makes its own HTTP connection (phos::http::Fetch).
struct phos_client {
  phos::http::Endpoint endpoint;  // where phosd is: its base URL ("http://HOST:PORT"), or its Unix socket
  std::string endpoint_text;      // as the caller gave it, for messages
  std::string token;     // empty: calls bear no Authorization header
};

namespace phos::capi {

// The same HTTP status means different things on different routes: 409 on a deploy is a name
// taken, elsewhere a state; 400 and 500 on invoke are usually the function's own refusal or
// failure.
enum class Route { kDeploy, kInvoke, kOther };

// Records `message` as the calling thread's last error and returns `status`.
phos_status Fail(phos_status status, std::string message) noexcept;
// The same for a message that lives as long as the process; allocates nothing, so it also serves
// when memory has run out.
phos_status FailStatic(phos_status status, const char* message) noexcept;

// The status of phosd's non-2xx `answer` to a call described by `what` ("invoke 'mlp'"), its
// message recorded as the last error. Reads both forms of phosd's error body, {"error": "message"}
// and {"error": {"code": "function_error", "message": "..."}}; a code this version knows decides,
// otherwise the HTTP status does.
phos_status FailFromAnswer(const http::ClientResponse& answer, Route route, std::string_view what);

// Sends `request` (its url a path under the client's endpoint) with the client's token. PHOS_OK with
// the 2xx answer in *answer; otherwise the failure, recorded (PHOS_UNAVAILABLE when no answer came).
phos_status Call(const phos_client& client, http::ClientRequest request, Route route, std::string_view what,
                 http::ClientResponse* answer);

// A NUL-terminated copy of `text` from malloc (released by phos_free), or null when memory ran out.
char* CopyString(std::string_view text);
// Stores a copy of `text` in *out; PHOS_INTERNAL when memory ran out.
phos_status ReturnString(std::string_view text, char** out);

// PHOS_INVALID_ARGUMENT (recorded) unless `name` can stand in a URL path as phosd's names do:
// letters, digits, '_', '-' and '.', and not "." or "..".
phos_status CheckName(const char* name);
// PHOS_INVALID_ARGUMENT (recorded) unless `struct_size` covers the first version of the struct
// named `what`, whose size is `first_size`.
phos_status CheckStructSize(size_t struct_size, size_t first_size, const char* what);
// PHOS_INVALID_ARGUMENT (recorded) when a required pointer argument is null.
phos_status CheckNotNull(const void* pointer, const char* what);

// Runs `body` (returning phos_status) so that no C++ exception leaves an exported function: out of
// memory and any other exception become PHOS_INTERNAL with the reason recorded.
template <typename Body>
phos_status Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return FailStatic(PHOS_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    try {
      return Fail(PHOS_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
      return FailStatic(PHOS_INTERNAL, "internal error (and out of memory describing it)");
    }
  } catch (...) {
    return FailStatic(PHOS_INTERNAL, "internal error: unknown exception");
  }
}

}  // namespace phos::capi
