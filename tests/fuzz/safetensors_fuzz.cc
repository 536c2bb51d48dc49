// A .safetensors file's header and tensor extents (functions/sdk's SafetensorsFile): the bytes
// become a file in memory (memfd) opened through its /proc path, the reader's only entry point;
// every tensor it accepts must then be readable whole.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "phos/fn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("safetensors-fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  size_t written = 0;
  while (written < size) {
    ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }
  auto file = phos::fn::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
  close(fd);  // the mapping keeps the file
  if (!file.ok()) return 0;
  for (const std::string& name : (*file)->TensorNames()) {
    auto info = (*file)->Tensor(name);
    if (!info.ok()) std::abort();
    auto bytes = (*file)->Bytes(name);
    if (!bytes.ok() || bytes->size() != (*info)->byte_size()) std::abort();
    // Bounded so a huge tensor in a small input does not become a huge allocation.
    if ((*info)->byte_size() <= (1u << 20)) (void)(*file)->ReadAsFloat32(name);
  }
  return 0;
}
