// The simgpu module images phosd agrees to load (docs/design.md D17). On simgpu a module image is a
// shared object that cuModuleLoadData dlopens inside phosd: its constructors and kernels run as
// phosd. So an image a function process sends is loaded only when its SHA-256 is that of an image
// phosd trusts — the module images the build made (the directory phosd is pointed at), which are
// the ones deployed functions embed. Anything else is refused before it reaches the driver.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
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
  static Result<std::shared_ptr<const TrustedModules>> FromDirectories(const std::vector<std::string>& dirs);

  static Digest DigestOf(const void* data, size_t size);
  void Add(const void* data, size_t size) { digests_.insert(DigestOf(data, size)); }
  bool Contains(const void* data, size_t size) const { return digests_.count(DigestOf(data, size)) != 0; }
  size_t size() const { return digests_.size(); }

 private:
  std::set<Digest> digests_;
};

}  // namespace phos::runtime
