#include "phos/runtime/trusted_modules.h"

#include <openssl/evp.h>

#include <chrono>
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

Result<std::shared_ptr<const TrustedModules>> TrustedModules::FromDirectories(
    const std::vector<std::string>& dirs, std::chrono::milliseconds rescan_interval) {
  std::shared_ptr<TrustedModules> trusted(new TrustedModules(dirs, rescan_interval));
  {
    std::lock_guard lock(trusted->mu_);
    PHOS_RETURN_IF_ERROR(trusted->ScanLocked());
  }
  PHOS_LOG(Info, "runtime", "{} trusted simgpu module image(s) in {}", trusted->size(), fmt::join(dirs, ", "));
  return std::shared_ptr<const TrustedModules>(std::move(trusted));
}

bool TrustedModules::Contains(const void* data, size_t size) const {
  const Digest digest = DigestOf(data, size);
  std::lock_guard lock(mu_);
  if (digests_.count(digest) != 0) return true;
  // Not as the directories were: perhaps as they are now. A directory gone since is no error here.
  if (std::chrono::steady_clock::now() - last_scan_ < rescan_interval_) return false;
  if (Status s = ScanLocked(); !s.ok()) PHOS_LOG_EVERY_SEC(Warn, "runtime", 10, "{}", s.message());
  return digests_.count(digest) != 0;
}

size_t TrustedModules::size() const {
  std::lock_guard lock(mu_);
  return std::set<Digest>(digests_.begin(), digests_.end()).size();
}

Status TrustedModules::ScanLocked() const {
  std::map<std::string, Seen> now;
  Status status = Status::Ok();
  for (const std::string& dir : dirs_) {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec);
    if (ec) {
      status = Status::NotFound(fmt::format("trusted module directory {}: {}", dir, ec.message()));
      continue;
    }
    for (const auto& entry : it) {
      const std::string name = entry.path().filename().string();
      if (name.size() <= kModuleSuffix.size() || !name.ends_with(kModuleSuffix)) continue;
      if (!entry.is_regular_file(ec) || ec) continue;
      const uintmax_t bytes = entry.file_size(ec);
      if (ec || bytes > kMaxTrustedImageBytes) continue;
      const auto modified = entry.last_write_time(ec);
      if (ec) continue;
      Seen seen{.bytes = bytes,
                .modified_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(modified.time_since_epoch()).count()};
      const std::string path = entry.path().string();
      if (auto old = files_.find(path);
          old != files_.end() && old->second.bytes == seen.bytes && old->second.modified_ns == seen.modified_ns) {
        now.emplace(path, old->second);
        continue;
      }
      std::ifstream in(entry.path(), std::ios::binary);
      std::vector<char> content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.eof() && in.fail()) continue;
      seen.digest = DigestOf(content.data(), content.size());
      now.emplace(path, seen);
    }
  }
  files_ = std::move(now);
  last_scan_ = std::chrono::steady_clock::now();
  digests_.clear();
  for (const auto& [path, seen] : files_) digests_.insert(seen.digest);
  return status;
}

}  // namespace phos::runtime
