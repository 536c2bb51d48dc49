// Moves between nodes over phosd's HTTP API (docs/design.md D10). The sending node's side is a
// runtime::PeerNode: it sends a checkpoint's manifest and the chunks the other node lacks, and
// forwards the invocations of a function that moved there. The receiving node's routes
// (routes.cc: /v1/chunks/missing, /v1/chunks/{id}, /v1/functions/{name}/ranges/{range}/snapshot)
// answer it.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "phos/base/status.h"
#include "phos/base/task_threads.h"
#include "phos/runtime/instance_manager.h"
#include "phos/store/store.h"

namespace phos::phosd {

// Chunk ids asked about in one /v1/chunks/missing request, at most.
inline constexpr size_t kMaxChunksAskedAtOnce = 16384;
// How long a move waits for the other node: a call, and the restore there (its start timeout and
// more), before it gives up.
inline constexpr long kPeerCallTimeoutMs = 120000;
inline constexpr long kPeerRestoreTimeoutMs = 600000;
// Invocations forwarded to one node, waiting or under way, at most; one more is answered as a full
// queue is (429): forwarding holds every waiting request's body in memory.
inline constexpr int kMaxForwardsPending = 1024;

// Another phosd, reached at its endpoint with its admin token.
class HttpPeer final : public runtime::PeerNode {
 public:
  // `endpoint`: "http://HOST:PORT" (no path). InvalidArgument for anything else, or an empty token.
  // `store` (this node's, where the snapshots sent are read) must outlive the peer.
  static Result<std::shared_ptr<HttpPeer>> Make(std::string endpoint, std::string token, store::Store* store);

  std::string Name() const override { return endpoint_; }
  Result<Received> SendSnapshot(const std::string& function, uint64_t version, int va_slot) override;
  void Invoke(const std::string& function, runtime::InvokeCall call,
              std::function<void(runtime::InvokeOutcome)> done) override;

 private:
  // One try: which chunks are missing there, those chunks, the manifest.
  Result<Received> SendSnapshotOnce(const std::string& function, uint64_t version, int va_slot);
  HttpPeer(std::string endpoint, std::string token, store::Store* store)
      : endpoint_(std::move(endpoint)), token_(std::move(token)), store_(store) {}

  const std::string endpoint_;
  const std::string token_;
  store::Store* const store_;
  // Forwarded invocations wait for the other node's answer here, several at once.
  std::atomic<int> pending_{0};  // waiting or under way (kMaxForwardsPending)
  TaskThreads forwarding_{8};
};

// The invocation outcome an HTTP answer of POST /v1/functions/{name}/invoke stands for (the
// inverse of the invoke route's mapping): 200 is the body; an error status is its kind, with the
// answer's message.
runtime::InvokeOutcome OutcomeOfInvokeAnswer(int status, const std::string& body);

}  // namespace phos::phosd
