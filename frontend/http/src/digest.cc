#include "phos/http/digest.h"

#include <openssl/evp.h>

namespace phos::http {

std::string Sha256Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  std::string out(2 * size, '0');
  for (unsigned i = 0; i < size; ++i) {
    out[2 * i] = kDigits[digest[i] >> 4];
    out[2 * i + 1] = kDigits[digest[i] & 0xf];
  }
  return out;
}

}  // namespace phos::http
