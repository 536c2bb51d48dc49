// Which local processes may open a GPU session on gpu.sock: checked with the kernel's record of
// the connecting process (SO_PEERCRED) on every connection, in addition to the instance token.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <mutex>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::runtime {

// The credentials of the process at the other end of a connected Unix socket.
Result<ucred> PeerCredentials(int fd);

// Allowed: root, the uid phosd runs as, and uid ranges added for the users functions run as.
// Thread-safe: ranges may be added while connections are checked.
class PeerPolicy {
 public:
  // `own_uid`: phosd's (geteuid()).
  explicit PeerPolicy(uid_t own_uid) : own_uid_(own_uid) {}
  // Allows the uids first..last (inclusive).
  void AllowUids(uid_t first, uid_t last);
  bool Allowed(const ucred& peer) const;

 private:
  const uid_t own_uid_;
  mutable std::mutex mu_;
  std::vector<std::pair<uid_t, uid_t>> ranges_;  // guarded by mu_
};

}  // namespace phos::runtime
