#include "phos/runtime/trusted_modules.h"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "phos/base/log.h"

namespace phos::runtime {
namespace {

constexpr std::string_view kModuleSuffix = ".simgpu.so";
// Far above any module the build makes; a file beyond it is not one.
constexpr uintmax_t kMaxTrustedImageBytes = uintmax_t{1} << 30;

}  // namespace

TrustedModules::Digest TrustedModules::DigestOf(const void* data, size_t size) {
  Digest digest{};
  unsigned int length = 0;
  // EVP_Digest fails only when the library cannot allocate: an all-zero digest then matches no image.
  if (EVP_Digest(data, size, digest.data(), &length, EVP_sha256(), nullptr) != 1 || length != digest.size()) {
    return Digest{};
  }
  return digest;
}

Result<std::shared_ptr<const TrustedModules>> TrustedModules::FromDirectories(const std::vector<std::string>& dirs) {
  auto trusted = std::make_shared<TrustedModules>();
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    if (ec) return Status::NotFound(fmt::format("trusted module directory {}: {}", dir, ec.message()));
    for (const auto& entry : it) {
      const std::string name = entry.path().filename().string();
      if (name.size() <= kModuleSuffix.size() || !name.ends_with(kModuleSuffix)) continue;
      if (!entry.is_regular_file(ec) || entry.file_size(ec) > kMaxTrustedImageBytes || ec) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.eof() && in.fail()) continue;
      trusted->Add(bytes.data(), bytes.size());
    }
  }
  PHOS_LOG(Info, "runtime", "{} trusted simgpu module image(s) in {}", trusted->size(), fmt::join(dirs, ", "));
  return std::shared_ptr<const TrustedModules>(std::move(trusted));
}

}  // namespace phos::runtime
