// A function's logs over HTTP (GET /v1/functions/{name}/logs): the last bytes of each of its
// processes' log files, and, when followed, what they gain for as long as the client listens.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "phos/http/server.h"

namespace phos::phosd {

// The most bytes of each file a request may ask for (?tail=).
inline constexpr uint64_t kMaxLogTailBytes = uint64_t{16} << 20;

// Where each log file was read up to, by path.
using LogOffsets = std::map<std::string, uint64_t>;

// The last `tail` bytes of each of `files`, each headed "==> NAME <==" (its file name), as tail
// prints several files; `offsets` gets where each was read up to.
std::string TailLogs(const std::vector<std::string>& files, uint64_t tail, LogOffsets* offsets);

// What each of `files` gained since `offsets` (a file not in it from its start, one that shrank —
// cut, docs/design.md D15 — from its start again), at most `most` bytes in all, headed as TailLogs
// heads them; `offsets` moves on.
std::string NewLogBytes(const std::vector<std::string>& files, uint64_t most, LogOffsets* offsets);

// The threads of followed logs: each streams what its function's files gain until the client goes
// away (Responder::Gone), the function is removed, or this object is destroyed.
class LogFollowers {
 public:
  // The function's log files now; nothing when it is gone.
  using ListFiles = std::function<std::optional<std::vector<std::string>>()>;

  LogFollowers() = default;
  ~LogFollowers();  // stops every follower and joins its thread
  LogFollowers(const LogFollowers&) = delete;
  LogFollowers& operator=(const LogFollowers&) = delete;

  // Streams to `out` (its head already sent): the last `tail` bytes of each file, then, every
  // 200 ms, what they gained.
  void Follow(ListFiles list, http::Responder out, uint64_t tail);

 private:
  struct Follower {
    std::thread thread;
    std::shared_ptr<bool> done;  // set (under mu_) when its thread is about to return
  };
  void JoinFinishedLocked();

  std::mutex mu_;
  std::condition_variable cv_;  // stopping_
  bool stopping_ = false;
  std::vector<Follower> followers_;
};

}  // namespace phos::phosd
