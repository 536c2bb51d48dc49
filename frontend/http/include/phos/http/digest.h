// SHA-256 of request bodies and tokens: the content address of an uploaded artifact
// (X-Phos-Artifact-Hash) and the form in which phosd keeps invoke tokens.
#pragma once

#include <string>
#include <string_view>

namespace phos::http {

// Lowercase hex SHA-256 of `bytes` (as sha256sum prints it).
std::string Sha256Hex(std::string_view bytes);

}  // namespace phos::http
