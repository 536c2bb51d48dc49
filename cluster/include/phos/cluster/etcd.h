// An etcd v3 client over etcd's JSON gateway (/v3/kv/..., /v3/lease/..., /v3/watch): keys put,
// got, listed by prefix and deleted, compare-and-swap, leases, and watches, for the state several
// phosd share. The gateway speaks HTTP/1.1 with JSON bodies, so the client needs nothing beyond
// phos-http's libcurl client: no gRPC stack, no generated code. Keys and values travel as base64
// and 64-bit numbers as JSON strings, as the gateway writes them.
//
// Every answer is checked before it is used: an etcd (or anything else on its port) that answers
// malformed JSON, leaves out a field, writes a revision that is no number or a key that is no
// base64, is an error (Corruption, naming the endpoint), never a crash.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "phos/base/status.h"

namespace phos::cluster {

struct EtcdOptions {
  // Where the members answer, "http://HOST:PORT" each (a trailing '/' allowed). A request goes to
  // the first; to the next when one is unreachable (Unavailable), and so on. A request whose answer
  // was lost (a timeout) may have been applied all the same: a put is then made twice, and a PutIf
  // may find its own put and return false.
  std::vector<std::string> endpoints;
  // The limit of each request (a watch has none: it lasts as long as the caller wants it).
  long timeout_ms = 5000;
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the store's revision when the key was made
  int64_t mod_revision = 0;     // ... when it was last put: what PutIf compares
  int64_t lease = 0;            // the lease the key lives by; 0: none
};

// Copyable: a copy talks to the same endpoints. Every call is a request of its own (no
// connection is kept), so one Etcd may be used from several threads at once.
class Etcd {
 public:
  // InvalidArgument when there is no endpoint, or one that is not http://HOST:PORT.
  static Result<Etcd> Make(EtcdOptions options);

  // Whether an etcd answers (GET /version); Unavailable naming every endpoint tried when none does.
  Status Ping() const;

  // Puts `value` under `key`, bound to `lease` when it is not 0. Returns the store's revision
  // after the put (the key's mod_revision now).
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0) const;
  // The key, or nullopt when there is none.
  Result<std::optional<KeyValue>> Get(const std::string& key) const;
  // Every key that begins with `prefix`, sorted by key; an empty prefix lists every key.
  // `revision` (may be null) gets the store's revision the listing is of: a watch from the one
  // after it sees every change since.
  Result<std::vector<KeyValue>> List(const std::string& prefix, int64_t* revision = nullptr) const;
  // Ok also when there was no such key.
  Status Delete(const std::string& key) const;
  // Compare-and-swap: puts when the key's mod_revision is `expected_mod_revision` (0: when the
  // key does not exist) and returns true; returns false, changing nothing, when it was not.
  Result<bool> PutIf(const std::string& key, const std::string& value, int64_t expected_mod_revision,
                     int64_t lease = 0) const;

  // A new lease of `ttl_seconds` (etcd may grant a longer one: it has a minimum); its id.
  Result<int64_t> GrantLease(int64_t ttl_seconds) const;
  // Refreshes the lease to its full TTL; NotFound when it has expired or was revoked.
  Status KeepAlive(int64_t lease) const;
  // Ends the lease and deletes every key bound to it; Ok also when it is gone already.
  Status Revoke(int64_t lease) const;

  // Watches every key under `prefix` from `start_revision` (0: from now), calling
  // on_event(kv, deleted) for each change in the order etcd made them (a deleted key's kv holds its
  // key and the revision of the delete). Runs until keep_going() returns false (asked with each
  // piece of the stream and about once a second meanwhile): returns Ok then. Returns Unavailable
  // when the stream ends on its own (etcd went away: the caller watches again from the revision
  // after the last event it saw), FailedPrecondition when etcd cancels the watch (its start
  // revision was compacted away), Corruption on a malformed message. on_event runs on the
  // calling thread and must not throw.
  Status Watch(const std::string& prefix, int64_t start_revision,
               const std::function<void(const KeyValue&, bool deleted)>& on_event,
               const std::function<bool()>& keep_going) const;

  const EtcdOptions& options() const { return options_; }

 private:
  friend class LeaseKeeper;
  explicit Etcd(EtcdOptions options) : options_(std::move(options)) {}
  // KeepAlive whose request ends early (Unavailable) once keep_going() returns false.
  Status KeepAlive(int64_t lease, const std::function<bool()>& keep_going) const;

  EtcdOptions options_;  // endpoints as Make checked them, without a trailing '/'
};

// Keeps a lease alive from a thread of its own: KeepAlive every third of the TTL, so that two
// missed rounds still leave the lease standing. When etcd says the lease is gone (NotFound), or no
// round has succeeded for a whole TTL (etcd unreachable: the lease has expired by now, or is about
// to), calls on_lost once, from that thread, and stops; whatever the caller holds through the
// lease (a key marking it alive, a lock) is then no longer its. Each round's request is given at
// most the TTL (the etcd's timeout_ms otherwise). on_lost must not destroy the LeaseKeeper.
class LeaseKeeper {
 public:
  LeaseKeeper(Etcd etcd, int64_t lease, int64_t ttl_seconds, std::function<void()> on_lost);
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;
  // Stops the thread (a round in flight is abandoned) and revokes the lease unless it was lost:
  // what was bound to it goes at once rather than a TTL later.
  ~LeaseKeeper();

  int64_t lease() const { return lease_; }
  bool lost() const { return lost_.load(); }
  // The rounds that refreshed the lease so far.
  int64_t rounds() const { return rounds_.load(); }

 private:
  void Run();

  const Etcd etcd_;
  const int64_t lease_;
  const std::chrono::milliseconds ttl_;
  const std::function<void()> on_lost_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  std::atomic<bool> lost_{false};
  std::atomic<int64_t> rounds_{0};
  std::thread thread_;  // last: started once everything it uses is
};

}  // namespace phos::cluster
