// The executables a deploy may name (docs/design.md, "Who may call what"): files under the
// configured functions directories, and artifacts uploaded to phosd, which keeps them itself,
// content-addressed by SHA-256. Nothing else on the host: a spec naming /bin/sh is refused.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/base/task_threads.h"

namespace phos::phosd {

struct ExecutablesOptions {
  // Directories whose files (after resolving every symbolic link) deploys may name. Each must
  // exist. Required: at least one.
  std::vector<std::string> functions_dirs;
  // Where uploaded artifacts are kept, <dir>/<sha256 hex> (created, mode 0700). Required.
  std::string artifacts_dir;
  // The largest artifact accepted. Default: 256 MiB.
  size_t max_artifact_bytes = size_t{256} << 20;
};

class Executables {
 public:
  static Result<std::unique_ptr<Executables>> Open(const ExecutablesOptions& options);

  // The real path of `path` (absolute) when it resolves to an executable regular file under a
  // functions directory or the artifacts directory; InvalidArgument saying why otherwise.
  Result<std::string> Resolve(const std::string& path) const;
  // The path of the stored artifact `hash` (64 lowercase hex digits); NotFound when none is.
  Result<std::string> ArtifactPath(std::string_view hash) const;
  // Stores `bytes` as an artifact and returns its hash. `expected_hash`, when not empty, must be
  // the bytes' SHA-256 (InvalidArgument otherwise: a body changed or cut short on the way). Too
  // large: InvalidArgument. Written to a temporary file, synced, made read-and-execute only (0500)
  // and renamed into place: a crash leaves the artifact whole or absent.
  Result<std::string> StoreArtifact(std::string_view bytes, std::string_view expected_hash) const;
  // StoreArtifact on this object's own thread (writing and syncing up to max_artifact_bytes must
  // not hold up the HTTP loop), then `done` there. Uploads are stored one at a time, in order.
  void StoreArtifactAsync(std::string bytes, std::string expected_hash,
                          std::function<void(Result<std::string>)> done) const;
  // Stores the uploads already queued, then joins the thread.
  ~Executables();
  Executables(const Executables&) = delete;
  Executables& operator=(const Executables&) = delete;

  const ExecutablesOptions& options() const { return options_; }

 private:
  explicit Executables(ExecutablesOptions options) : options_(std::move(options)) {}

  ExecutablesOptions options_;  // artifacts_dir: its real path
  // The functions directories' and the artifacts directory's real paths, each ending in '/'.
  std::vector<std::string> roots_;
  // Stores uploads one at a time, in order; last, so that it drains before the rest goes.
  std::unique_ptr<TaskThreads> uploader_;
};

}  // namespace phos::phosd
