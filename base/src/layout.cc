#include "phos/base/layout.h"

#include <system_error>

namespace phos::layout {

std::filesystem::path LibDirOfExecutable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return LibDirBeside(self.parent_path().parent_path() / "lib");
}

std::filesystem::path LibDirBeside(const std::filesystem::path& lib_dir) { return lib_dir / "phos"; }

}  // namespace phos::layout
