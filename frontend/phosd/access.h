// Who may call which of phosd's HTTP routes (docs/design.md, "Who may call what"): the admin
// token, per-function invoke tokens, and the listener's address.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "phos/base/status.h"
#include "phos/http/server.h"

namespace phos::phosd {

// What a route asks of its caller. Every route names one (AddRoute in routes.cc takes no default),
// so a new admin route cannot be added open by omission.
enum class Access {
  kOpen,    // anyone who reaches the listener (/healthz, /metrics, GET /v1/functions redacted)
  kAdmin,   // the admin token
  kInvoke,  // the function's invoke token when its spec sets one (the admin token also passes)
};

// The admin token of `data_dir`: <data_dir>/admin.token, created at first start (32 bytes from
// getrandom, hex, mode 0600) and read back on later starts. Fails when the file exists but is
// readable by group or others, or empty.
Result<std::string> LoadOrCreateAdminToken(const std::string& data_dir);
// A token file given on the command line: refused when readable by group or others, or empty.
// Surrounding whitespace (a trailing newline) is not part of the token.
Result<std::string> ReadTokenFile(const std::string& path);

// Equality whose time does not depend on where the strings differ (nor, beyond the hashing, on
// their lengths): both are hashed and the digests compared with CRYPTO_memcmp.
bool TokensEqual(std::string_view a, std::string_view b);

// True for a listen host that only this machine reaches: 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(std::string_view host);

// Checks requests against the admin token and a function's invoke token.
class AccessPolicy {
 public:
  explicit AccessPolicy(std::string admin_token) : admin_token_(std::move(admin_token)) {}

  // The bearer token of `request`'s Authorization header, or an empty string when there is none;
  // false (and 401's message in *why) when the header is there but not "Bearer <token>".
  static bool BearerToken(const http::Request& request, std::string* token, std::string* why);
  // True when the request carries the admin token.
  bool IsAdmin(const http::Request& request) const;
  // Nothing when the request may go on; otherwise the answer to send instead: 401 when the
  // credential is missing or malformed, 403 when it is wrong, each a JSON {"error"} with
  // WWW-Authenticate: Bearer. `invoke_token_sha256` is the function's (kInvoke; empty: open).
  std::optional<http::Response> Check(const http::Request& request, Access access,
                                      std::string_view invoke_token_sha256 = {}) const;

 private:
  std::string admin_token_;
};

}  // namespace phos::phosd
