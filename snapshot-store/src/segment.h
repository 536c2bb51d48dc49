// Segment files: append-only files of chunk bytes. Each chunk starts at a 4 KiB-aligned offset
// so that it can be read with O_DIRECT straight into a caller's aligned buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "phos/base/status.h"

namespace phos::store {

// "<dir>/00000042.seg"
std::string SegmentPath(const std::string& dir, uint64_t id);
// The id of a segment file name, or false when `name` is not one.
bool ParseSegmentName(const std::string& name, uint64_t* id);
// fsync of a directory, so that files created in it survive a crash.
Status SyncDirectory(const std::string& dir);

class SegmentWriter {
 public:
  static Result<std::unique_ptr<SegmentWriter>> Create(const std::string& dir, uint64_t id);
  ~SegmentWriter();
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;

  // Appends `size` bytes at the next aligned offset and returns that offset.
  Result<uint64_t> Append(const void* data, size_t size);
  // Makes everything appended so far durable.
  Status Sync();
  uint64_t id() const { return id_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  SegmentWriter(std::string path, uint64_t id, int fd) : path_(std::move(path)), id_(id), fd_(fd) {}
  std::string path_;
  uint64_t id_;
  int fd_;
  uint64_t size_ = 0;
};

class SegmentFile {
 public:
  // Opens for reading; with `direct`, also an O_DIRECT descriptor when the file system allows
  // one (tmpfs refuses O_DIRECT: reads then fall back to the page cache).
  static Result<std::unique_ptr<SegmentFile>> Open(const std::string& path, bool direct);
  ~SegmentFile();
  SegmentFile(const SegmentFile&) = delete;
  SegmentFile& operator=(const SegmentFile&) = delete;

  // Reads `size` bytes at aligned `offset` into `dst`; direct when `dst` is aligned.
  Status Read(uint64_t offset, size_t size, void* dst) const;
  bool direct() const { return direct_fd_ >= 0; }
  uint64_t file_size() const;

 private:
  SegmentFile(std::string path, int fd, int direct_fd) : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd) {}
  Status PreadFully(int fd, uint64_t offset, size_t size, void* dst, size_t* got) const;
  std::string path_;
  int fd_;
  int direct_fd_;
};

}  // namespace phos::store
