#include "phos/runtime/peer_policy.h"

#include <cerrno>

namespace phos::runtime {

Result<ucred> PeerCredentials(int fd) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0)
    return Status::FromErrno(errno, "SO_PEERCRED");
  return peer;
}

void PeerPolicy::AllowUids(uid_t first, uid_t last) {
  std::lock_guard lock(mu_);
  ranges_.emplace_back(first, last);
}

bool PeerPolicy::Allowed(const ucred& peer) const {
  if (peer.uid == 0 || peer.uid == own_uid_) return true;
  std::lock_guard lock(mu_);
  for (const auto& [first, last] : ranges_) {
    if (peer.uid >= first && peer.uid <= last) return true;
  }
  return false;
}

}  // namespace phos::runtime
