// An ELF file as phos-fn check reads it (frontend/surface's ReadElfFile): the bytes become a file
// in memory (memfd) read through its /proc path; whatever the reader accepts must be what it
// promises (sorted, names non-empty).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

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
  if (!std::is_sorted(elf->exports.begin(), elf->exports.end())) std::abort();
  for (const auto& i : elf->imports) {
    if (i.name.empty()) std::abort();
  }
  return 0;
}
