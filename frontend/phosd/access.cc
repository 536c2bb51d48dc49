#include "access.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "errors.h"
#include "phos/http/digest.h"

namespace phos::phosd {
namespace {

using http::Sha256Hex;

constexpr size_t kTokenBytes = 32;
// A token file is a line of hex; anything much longer is not one.
constexpr size_t kMaxTokenFileBytes = 4096;

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

Status WriteAll(int fd, std::string_view text, const std::string& path) {
  while (!text.empty()) {
    ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write " + path);
    text.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

http::Response Refuse(int status, const std::string& message) {
  http::Response r = ErrorResponse(status, message);
  r.headers.emplace_back("WWW-Authenticate", status == 403 ? "Bearer error=\"invalid_token\"" : "Bearer");
  return r;
}

}  // namespace

Result<std::string> ReadTokenFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open token file " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = Status::FromErrno(errno, "stat token file " + path);
    close(fd);
    return s;
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::FailedPrecondition("token file " + path + " has mode " + mode +
                                      ": group and others may not have access to it (chmod 600)");
  }
  std::string text(kMaxTokenFileBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Status::FromErrno(errno, "read token file " + path);
      close(fd);
      return s;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got > kMaxTokenFileBytes)
    return Status::InvalidArgument("token file " + path + " is larger than 4 KiB");
  text.resize(got);
  std::string_view token = Trim(text);
  if (token.empty()) return Status::InvalidArgument("token file " + path + " is empty");
  for (char c : token) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return Status::InvalidArgument("token file " + path + ": a token is one word of printable characters");
    }
  }
  return std::string(token);
}

Result<std::string> LoadOrCreateAdminToken(const std::string& data_dir) {
  const std::string path = data_dir + "/admin.token";
  if (access(path.c_str(), F_OK) == 0) return ReadTokenFile(path);

  unsigned char bytes[kTokenBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "getrandom");
    got += static_cast<size_t>(n);
  }
  const std::string token = Hex(bytes, sizeof(bytes));
  // Written whole to a temporary file, then linked into place: a crash leaves no half-written
  // token, and a token another phosd placed meanwhile is kept (link does not replace).
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  Status written = WriteAll(fd, token + "\n", tmp);
  if (written.ok() && fchmod(fd, 0600) != 0) written = Status::FromErrno(errno, "chmod " + tmp);
  if (written.ok() && fsync(fd) != 0) written = Status::FromErrno(errno, "fsync " + tmp);
  close(fd);
  if (written.ok() && link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    written = Status::FromErrno(errno, "link " + path);
  }
  unlink(tmp.c_str());
  if (!written.ok()) return written;
  return ReadTokenFile(path);
}

bool TokensEqual(std::string_view a, std::string_view b) {
  const std::string ha = Sha256Hex(a);
  const std::string hb = Sha256Hex(b);
  return CRYPTO_memcmp(ha.data(), hb.data(), ha.size()) == 0;
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return true;
  std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

bool AccessPolicy::BearerToken(const http::Request& request, std::string* token, std::string* why) {
  token->clear();
  const std::string* header = request.Header("Authorization");
  if (header == nullptr) return true;
  constexpr std::string_view kScheme = "Bearer ";
  std::string_view value = Trim(*header);
  if (value.size() <= kScheme.size() || strncasecmp(value.data(), kScheme.data(), kScheme.size()) != 0) {
    *why = "Authorization must be 'Bearer <token>'";
    return false;
  }
  std::string_view rest = Trim(value.substr(kScheme.size()));
  if (rest.empty() || rest.find_first_of(" \t") != std::string_view::npos) {
    *why = "Authorization must be 'Bearer <token>'";
    return false;
  }
  *token = std::string(rest);
  return true;
}

bool AccessPolicy::IsAdmin(const http::Request& request) const {
  std::string token;
  std::string why;
  return BearerToken(request, &token, &why) && !token.empty() && TokensEqual(token, admin_token_);
}

std::optional<http::Response> AccessPolicy::Check(const http::Request& request, Access access,
                                                  std::string_view invoke_token_sha256) const {
  if (access == Access::kOpen) return std::nullopt;
  if (access == Access::kInvoke && invoke_token_sha256.empty()) return std::nullopt;
  std::string token;
  std::string why;
  if (!BearerToken(request, &token, &why)) return Refuse(401, why);
  const bool admin_route = access == Access::kAdmin;
  if (token.empty()) {
    return Refuse(401, admin_route ? "this route needs the admin token (Authorization: Bearer <token>)"
                                   : "this function needs its invoke token (Authorization: Bearer <token>)");
  }
  if (TokensEqual(token, admin_token_)) return std::nullopt;
  if (!admin_route) {
    // Compared as digests: the registry keeps only the token's SHA-256.
    const std::string digest = Sha256Hex(token);
    if (digest.size() == invoke_token_sha256.size() &&
        CRYPTO_memcmp(digest.data(), invoke_token_sha256.data(), digest.size()) == 0) {
      return std::nullopt;
    }
    return Refuse(403, "wrong invoke token for this function");
  }
  return Refuse(403, "wrong admin token");
}

}  // namespace phos::phosd
