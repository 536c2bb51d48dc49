// The simgpu module images phosd agrees to load (docs/design.md D17). On simgpu a module image is a
// shared object that cuModuleLoadData dlopens inside phosd: its constructors and kernels run as
// phosd. So an image a function process sends is loaded only when its SHA-256 is that of an image
// phosd trusts — the module images the build made (the directory phosd is pointed at), which are
// the ones deployed functions embed. Anything else is refused before it reaches the driver.
//
// An image put into a trusted directory while phosd runs is trusted from then on: an image not
// found sends a look at the directories (a listing and a stat per module file, at most once per
// `rescan_interval`), and the files added or changed since the last look (by name, size or
// modification time) are hashed.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "phos/base/status.h"

namespace phos::runtime {

class TrustedModules {
 public:
  using Digest = std::array<uint8_t, 32>;  // SHA-256

  // Every regular file named *.simgpu.so directly in each of `dirs` (symbolic links to regular
  // files included). NotFound for a directory that cannot be read.
  // `rescan_interval`: the least time between two looks at the directories for images not found
  // (a tenant sending unknown images makes phosd look no more often than this). Default: 1 s.
  static Result<std::shared_ptr<const TrustedModules>> FromDirectories(
      const std::vector<std::string>& dirs, std::chrono::milliseconds rescan_interval = std::chrono::seconds(1));

  static Digest DigestOf(const void* data, size_t size);
  // Whether the image is one of the directories' (as they are now, if it was not as they were).
  bool Contains(const void* data, size_t size) const;
  // How many different images are trusted.
  size_t size() const;

 private:
  // What a module file was when it was last hashed.
  struct Seen {
    uintmax_t bytes = 0;
    int64_t modified_ns = 0;
    Digest digest{};
  };

  TrustedModules(std::vector<std::string> dirs, std::chrono::milliseconds rescan_interval)
      : dirs_(std::move(dirs)), rescan_interval_(rescan_interval) {}
  // Lists the directories and hashes each module file new or changed since the last look; a file
  // gone is forgotten. Holds mu_.
  Status ScanLocked() const;

  const std::vector<std::string> dirs_;
  const std::chrono::milliseconds rescan_interval_;
  mutable std::mutex mu_;
  mutable std::chrono::steady_clock::time_point last_scan_{};
  mutable std::map<std::string, Seen> files_;  // by path
  mutable std::multiset<Digest> digests_;      // one per file in files_
};

}  // namespace phos::runtime
