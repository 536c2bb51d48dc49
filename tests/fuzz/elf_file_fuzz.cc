// An ELF file as phos-fn check reads it (frontend/surface's ReadElfFile): the bytes become a file
// in memory (memfd) read through its /proc path. Beside the sanitizers' findings, a name the
// reader returns that is not in the input is a failure.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "phos/surface/elf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("elf-file-fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  size_t written = 0;
  while (written < size) {
    ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }
  auto elf = phos::surface::ReadElfFile("/proc/self/fd/" + std::to_string(fd));
  close(fd);
  if (!elf.ok()) return 0;
  // Every name read is bytes of the input (its string tables), not memory the reader strayed into.
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto check = [&](const std::string& name) {
    if (input.find(name) == std::string_view::npos) std::abort();
  };
  for (const auto& name : elf->exports) check(name);
  for (const auto& i : elf->imports) {
    check(i.name);
    check(i.version_library);
  }
  for (const auto& name : elf->needed) check(name);
  check(elf->soname);
  check(elf->interpreter);
  return 0;
}
