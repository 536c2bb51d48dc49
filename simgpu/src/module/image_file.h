// A module image copied into an anonymous memory file (memfd), from which it is dlopen'ed and
// which keeps the bytes the module was loaded from (phos hashes modules by content).
#pragma once

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include <string>

namespace phos::sim {

class ImageFile {
 public:
  ImageFile() = default;
  ~ImageFile();
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;

  // Creates the empty file. CUDA_ERROR_OUT_OF_MEMORY or CUDA_ERROR_OPERATING_SYSTEM on failure.
  CUresult Create();

  // Copies image[offset, offset + size) to the same place in the file. Memory the caller does not
  // have mapped makes the kernel's copy fail with EFAULT where a plain read would SIGSEGV: that is
  // CUDA_ERROR_INVALID_IMAGE, so callers may read a range of `image` directly once this succeeded.
  CUresult CopyIn(const unsigned char* image, uint64_t offset, uint64_t size);

  // Fixes the file at `size` bytes, seals it against any change and maps it read-only.
  CUresult Seal(size_t size);

  // A path for dlopen that names this file and no object already loaded in the process.
  // glibc's dlopen returns a loaded object whose name equals the path it is given without opening
  // the file (elf/dl-load.c, _dl_map_object). "/proc/self/fd/N" names come back once descriptor N
  // is closed, and a module that dlclose left loaded (another reference, or marked NODELETE) keeps
  // its name; so the descriptor moves to a number whose path no loaded object goes by.
  CUresult UniqueLoadPath(std::string* path);

  // Valid after Seal().
  const void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace phos::sim
