// The extent of an ELF shared object in memory, for cuModuleLoadData, which is given a pointer and
// no size: the image ends where the last of its parts ends (the ELF header, the program header
// table and every segment's file range, the section header table and every section's contents).
#pragma once

#include <cuda.h>
#include <stddef.h>

#include "module/image_file.h"

namespace phos::sim {

// A simgpu module holds host code for a few kernels: tens of KiB to a few MiB. The cap bounds what
// a corrupt header can make the loader copy.
inline constexpr size_t kMaxModuleImageSize = size_t{1} << 30;

// Validates the ELF header of `image` as a 64-bit little-endian shared object for this host's
// machine (x86-64 here), copying every byte it reads into `file` first (ImageFile::CopyIn), and
// sets `*size` to the image's extent. `known_size` is the size of the buffer when the caller knows
// it (a file), 0 when not; an image that claims to extend past it is truncated.
// CUDA_ERROR_INVALID_IMAGE for anything else, including unreadable memory.
CUresult MeasureElfImage(const unsigned char* image, size_t known_size, ImageFile* file, size_t* size);

}  // namespace phos::sim
