#include "executables.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "phos/http/digest.h"
#include "phos/runtime/instance_registry.h"

namespace phos::phosd {
namespace {

// realpath(3): every symbolic link and "..", resolved; nothing when the path does not exist.
Result<std::string> RealPath(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return Status::FromErrno(errno, "resolve " + path);
  std::string out(real);
  free(real);
  return out;
}

Status SyncDirectory(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + dir);
  Status s = fsync(fd) == 0 ? Status::Ok() : Status::FromErrno(errno, "fsync " + dir);
  close(fd);
  return s;
}

}  // namespace

Result<std::unique_ptr<Executables>> Executables::Open(const ExecutablesOptions& options) {
  if (options.functions_dirs.empty()) return Status::InvalidArgument("no functions directory");
  if (options.artifacts_dir.empty()) return Status::InvalidArgument("no artifacts directory");
  std::unique_ptr<Executables> out(new Executables(options));
  std::error_code ec;
  auto add_root = [&](const std::string& dir) -> Status {
    PHOS_ASSIGN_OR_RETURN(std::string real, RealPath(dir));
    if (!std::filesystem::is_directory(real, ec)) return Status::InvalidArgument(dir + " is not a directory");
    // The trailing '/' makes "/srv/fn" not a prefix of "/srv/fn-other/x".
    out->roots_.push_back(real == "/" ? real : real + "/");
    return Status::Ok();
  };
  for (const std::string& dir : options.functions_dirs) PHOS_RETURN_IF_ERROR(add_root(dir));
  std::filesystem::create_directories(options.artifacts_dir, ec);
  if (ec) return Status::IoError("create " + options.artifacts_dir + ": " + ec.message());
  if (chmod(options.artifacts_dir.c_str(), 0700) != 0) {
    return Status::FromErrno(errno, "chmod " + options.artifacts_dir);
  }
  PHOS_RETURN_IF_ERROR(add_root(options.artifacts_dir));
  out->options_.artifacts_dir = out->roots_.back();
  out->options_.artifacts_dir.pop_back();
  out->uploader_ = std::make_unique<TaskThreads>(1);
  return out;
}

Executables::~Executables() = default;  // the uploader stores what is queued, then joins

void Executables::StoreArtifactAsync(std::string bytes, std::string expected_hash,
                                     std::function<void(Result<std::string>)> done) const {
  uploader_->Post([this, bytes = std::move(bytes), expected_hash = std::move(expected_hash),
                   done = std::move(done)] { done(StoreArtifact(bytes, expected_hash)); });
}

Result<std::string> Executables::Resolve(const std::string& path) const {
  if (path.empty() || path.front() != '/') {
    return Status::InvalidArgument("executable '" + path + "' must be an absolute path");
  }
  Result<std::string> real = RealPath(path);
  if (!real.ok()) return Status::InvalidArgument("executable '" + path + "': " + real.status().message());
  bool inside = false;
  for (const std::string& root : roots_) inside = inside || real->rfind(root, 0) == 0;
  if (!inside) {
    std::string dirs;
    for (size_t i = 0; i + 1 < roots_.size(); ++i) dirs += (dirs.empty() ? "" : ", ") + roots_[i];
    return Status::InvalidArgument("executable '" + path + "' (" + *real +
                                   ") is not under a functions directory (" + dirs +
                                   ") nor an uploaded artifact (POST /v1/artifacts)");
  }
  struct stat st {};
  if (stat(real->c_str(), &st) != 0 || !S_ISREG(st.st_mode) || access(real->c_str(), X_OK) != 0) {
    return Status::InvalidArgument("executable '" + path + "' is not an executable file");
  }
  return real;
}

Result<std::string> Executables::ArtifactPath(std::string_view hash) const {
  if (!runtime::IsSha256Hex(hash)) {
    return Status::InvalidArgument("artifact '" + std::string(hash) +
                                   "' is not a SHA-256 (64 lowercase hex digits)");
  }
  std::string path = options_.artifacts_dir + "/" + std::string(hash);
  if (access(path.c_str(), F_OK) != 0) {
    return Status::NotFound("no artifact " + std::string(hash) + " (upload it with POST /v1/artifacts)");
  }
  return path;
}

Result<std::string> Executables::StoreArtifact(std::string_view bytes, std::string_view expected_hash) const {
  if (bytes.empty()) return Status::InvalidArgument("an artifact may not be empty");
  if (bytes.size() > options_.max_artifact_bytes) {
    return Status::InvalidArgument("artifact of " + std::to_string(bytes.size()) +
                                   " bytes is larger than the " +
                                   std::to_string(options_.max_artifact_bytes >> 20) + " MiB limit");
  }
  if (!expected_hash.empty() && !runtime::IsSha256Hex(expected_hash)) {
    return Status::InvalidArgument("X-Phos-Artifact-Hash must be a SHA-256 (64 lowercase hex digits)");
  }
  const std::string hash = http::Sha256Hex(bytes);
  if (!expected_hash.empty() && expected_hash != hash) {
    return Status::InvalidArgument("artifact hash mismatch: the body's SHA-256 is " + hash + ", not " +
                                   std::string(expected_hash));
  }
  const std::string path = options_.artifacts_dir + "/" + hash;
  if (access(path.c_str(), F_OK) == 0) return hash;  // content-addressed: the same bytes are there

  char tmp[PATH_MAX];
  std::snprintf(tmp, sizeof(tmp), "%s/.upload-XXXXXX", options_.artifacts_dir.c_str());
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "create a file in " + options_.artifacts_dir);
  Status written = Status::Ok();
  std::string_view rest = bytes;
  while (written.ok() && !rest.empty()) {
    ssize_t n = write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) written = Status::FromErrno(errno, "write artifact " + hash);
    if (n > 0) rest.remove_prefix(static_cast<size_t>(n));
  }
  if (written.ok() && fchmod(fd, 0555) != 0) written = Status::FromErrno(errno, "chmod artifact " + hash);
  if (written.ok() && fsync(fd) != 0) written = Status::FromErrno(errno, "fsync artifact " + hash);
  close(fd);
  if (written.ok() && rename(tmp, path.c_str()) != 0)
    written = Status::FromErrno(errno, "rename artifact " + hash);
  if (!written.ok()) {
    unlink(tmp);
    return written;
  }
  PHOS_RETURN_IF_ERROR(SyncDirectory(options_.artifacts_dir));
  return hash;
}

}  // namespace phos::phosd
