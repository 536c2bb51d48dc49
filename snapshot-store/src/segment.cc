#include "segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "phos/store/aligned_buffer.h"

namespace phos::store {

std::string SegmentPath(const std::string& dir, uint64_t id) { return fmt::format("{}/{:08d}.seg", dir, id); }

bool ParseSegmentName(const std::string& name, uint64_t* id) {
  if (name.size() != 12 || name.substr(8) != ".seg") return false;
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *id = v;
  return true;
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open directory " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno(err, "fsync directory " + dir);
  return Status::Ok();
}

Result<std::unique_ptr<SegmentWriter>> SegmentWriter::Create(const std::string& dir, uint64_t id) {
  std::string path = SegmentPath(dir, id);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create segment " + path);
  return std::unique_ptr<SegmentWriter>(new SegmentWriter(std::move(path), id, fd));
}

SegmentWriter::~SegmentWriter() { ::close(fd_); }

Result<uint64_t> SegmentWriter::Append(const void* data, size_t size) {
  uint64_t offset = size_;
  size_t padded = AlignedBuffer::RoundUp(size);
  static const char kZeros[AlignedBuffer::kAlignment] = {};
  size_t done = 0;
  while (done < padded) {
    const char* src = done < size ? static_cast<const char*>(data) + done : kZeros;
    size_t len = done < size ? size - done : padded - done;
    ssize_t n = ::pwrite(fd_, src, len, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(errno, "write segment " + path_);
    done += static_cast<size_t>(n);
  }
  size_ = offset + padded;
  return offset;
}

Status SegmentWriter::Sync() {
  if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fsync segment " + path_);
  return Status::Ok();
}

Result<std::unique_ptr<SegmentFile>> SegmentFile::Open(const std::string& path, bool direct) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open segment " + path);
  int direct_fd = -1;
  if (direct) direct_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  return std::unique_ptr<SegmentFile>(new SegmentFile(path, fd, direct_fd));
}

SegmentFile::~SegmentFile() {
  ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

uint64_t SegmentFile::file_size() const {
  struct stat st {};
  return ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

Status SegmentFile::PreadFully(int fd, uint64_t offset, size_t size, void* dst, size_t* got) const {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, static_cast<char*>(dst) + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, fmt::format("read segment {} at {}", path_, offset + done));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  *got = done;
  return Status::Ok();
}

Status SegmentFile::Read(uint64_t offset, size_t size, void* dst) const {
  size_t got = 0;
  if (direct_fd_ < 0 || !AlignedBuffer::IsAligned(dst) || offset % AlignedBuffer::kAlignment != 0) {
    PHOS_RETURN_IF_ERROR(PreadFully(fd_, offset, size, dst, &got));
    if (got != size) {
      return Status::Corruption(fmt::format("segment {} ends at {}: chunk at {} needs {} bytes", path_, offset + got,
                                            offset, size));
    }
    return Status::Ok();
  }
  // Whole blocks go straight into the caller's buffer; the partial last block goes through a
  // bounce block, since O_DIRECT cannot read part of one into memory the caller does not own.
  size_t whole = size / AlignedBuffer::kAlignment * AlignedBuffer::kAlignment;
  if (whole > 0) {
    PHOS_RETURN_IF_ERROR(PreadFully(direct_fd_, offset, whole, dst, &got));
    if (got != whole) {
      return Status::Corruption(
          fmt::format("segment {} ends at {}: chunk at {} needs {} bytes", path_, offset + got, offset, size));
    }
  }
  if (whole < size) {
    alignas(AlignedBuffer::kAlignment) static thread_local char bounce[AlignedBuffer::kAlignment];
    PHOS_RETURN_IF_ERROR(PreadFully(direct_fd_, offset + whole, sizeof bounce, bounce, &got));
    if (got < size - whole) {
      return Status::Corruption(fmt::format("segment {} ends at {}: chunk at {} needs {} bytes", path_,
                                            offset + whole + got, offset, size));
    }
    std::memcpy(static_cast<char*>(dst) + whole, bounce, size - whole);
  }
  return Status::Ok();
}

}  // namespace phos::store
