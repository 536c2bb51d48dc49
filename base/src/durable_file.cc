#include "phos/base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "phos/base/unique_fd.h"

namespace phos {

Status ReplaceFileDurably(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd.valid()) return Status::FromErrno(errno, "create " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write " + tmp);
    done += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + tmp);
  fd.reset();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "rename to " + path);
  // The rename itself survives a crash once the directory is synced.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  UniqueFd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid()) return Status::FromErrno(errno, "open " + dir);
  if (fsync(dir_fd.get()) != 0) return Status::FromErrno(errno, "fsync " + dir);
  return Status::Ok();
}

}  // namespace phos
