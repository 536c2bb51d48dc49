#include "module/image_file.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "phos/base/log.h"

namespace phos::sim {
namespace {

CUresult FromErrno(int err) {
  return err == ENOMEM || err == ENOSPC || err == EFBIG ? CUDA_ERROR_OUT_OF_MEMORY
                                                        : CUDA_ERROR_OPERATING_SYSTEM;
}

std::string FdPath(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

bool IsLoadedObjectName(const std::string& path) {
  struct Search {
    const std::string* path;
    bool found;
  } search{&path, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && *s->path == info->dlpi_name) s->found = true;
        return s->found ? 1 : 0;
      },
      &search);
  return search.found;
}

}  // namespace

ImageFile::~ImageFile() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
}

CUresult ImageFile::Create() {
  fd_ = memfd_create("phos-simgpu-module", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "module load: memfd_create: {}", strerror(err));
    return FromErrno(err);
  }
  return CUDA_SUCCESS;
}

CUresult ImageFile::CopyIn(const unsigned char* image, uint64_t offset, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd_, image + offset + done, size - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : EIO;
    if (err == EFAULT) {
      PHOS_LOG(Warn, "simgpu", "module load: image bytes [{}, {}) are not readable (truncated image?)",
               offset + done, offset + size);
      return CUDA_ERROR_INVALID_IMAGE;
    }
    PHOS_LOG(Warn, "simgpu", "module load: writing the image to memfd: {}", strerror(err));
    return FromErrno(err);
  }
  return CUDA_SUCCESS;
}

CUresult ImageFile::Seal(size_t size) {
  if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "module load: ftruncate memfd: {}", strerror(err));
    return FromErrno(err);
  }
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "module load: sealing memfd: {}", strerror(err));
    return FromErrno(err);
  }
  void* data = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd_, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "module load: mapping memfd: {}", strerror(err));
    return FromErrno(err);
  }
  data_ = data;
  size_ = size;
  return CUDA_SUCCESS;
}

CUresult ImageFile::UniqueLoadPath(std::string* path) {
  // Each move skips at least one number held by a stale object; a handful is the most seen.
  constexpr int kMaxMoves = 64;
  for (int moves = 0; moves <= kMaxMoves; ++moves) {
    std::string candidate = FdPath(fd_);
    if (!IsLoadedObjectName(candidate)) {
      *path = std::move(candidate);
      return CUDA_SUCCESS;
    }
    const int moved = fcntl(fd_, F_DUPFD_CLOEXEC, fd_ + 1);
    if (moved < 0) {
      const int err = errno;
      PHOS_LOG(Warn, "simgpu", "module load: moving memfd off {}: {}", candidate, strerror(err));
      return FromErrno(err);
    }
    close(fd_);
    fd_ = moved;
  }
  PHOS_LOG(Warn, "simgpu", "module load: no unused /proc/self/fd path after {} tries", kMaxMoves);
  return CUDA_ERROR_OPERATING_SYSTEM;
}

}  // namespace phos::sim
