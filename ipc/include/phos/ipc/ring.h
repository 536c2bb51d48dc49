// The per-session shared-memory call ring (docs/remoting.md): one memfd mapped by the frontend
// (the only producer; its callers serialise on a mutex) and by the server's executor thread (the
// only consumer). Layout: RingHeader, a byte ring of records, a reply area.
//
// Records never wrap: one that does not fit before the ring's end is preceded by a kPad record
// filling the rest. Waiting is a brief spin, then a futex on a header word, so neither side
// makes a system call while the other keeps up. Everything the consumer reads from the ring is
// validated against sizes it fixed itself (Attach keeps the sizes it was given, not the peer's
// header), so a broken or malicious frontend can make its own calls fail, never the server. The
// header also carries the two host-function queues, which bypass the records: one from the
// server (a host function's place in its stream was reached), one to it (the function returned),
// so that neither waits for the other side's record traffic. Each queue has one poster and one
// taker, and the poster reads back nothing of it. The
// memfd is sealed against shrinking and growing before it is handed over (a truncated ring would
// make the server's next read a SIGBUS), and the consumer keeps its own offset rather than
// reading back the shared one: each header field it reads is read once, then checked, then used.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "phos/base/status.h"
#include "phos/ipc/wire.h"

namespace phos::ipc {

inline constexpr uint32_t kRingMagic = 0x474e4952;  // "RING"

// The host-function queues (docs/remoting.md "Host functions"): the server tells the frontend
// that a host function's place in its stream was reached, or that it refused it; the frontend
// tells the server that a function returned. Entry n is events[n % kMaxHostFnSlots]; the server
// never has more than kMaxHostFnSlots pending, so a taker that keeps up loses none.
enum class HostFnQueueId : uint32_t { kToFrontend = 0, kToServer = 1 };
struct HostFnQueue {
  alignas(64) std::atomic<uint64_t> posted;  // entries ever appended
  std::atomic<uint32_t> futex;               // moved with each append
  HostFnEvent events[kMaxHostFnSlots];
};

struct RingHeader {
  uint32_t magic;
  uint32_t version;  // kWireVersion
  uint64_t data_bytes;
  uint64_t reply_bytes;
  alignas(64) std::atomic<uint64_t> produced;  // bytes ever written (producer)
  std::atomic<uint64_t> submitted_seq;
  alignas(64) std::atomic<uint64_t> consumed;  // bytes ever released (consumer)
  std::atomic<uint64_t> completed_seq;
  alignas(64) std::atomic<uint32_t> server_sleeping;
  std::atomic<uint32_t> server_futex;
  std::atomic<uint32_t> client_waiting;
  std::atomic<uint32_t> client_futex;
  // What a waiting client waits for, so the server wakes it once rather than at every record:
  // completed_seq reaching client_wait_seq, or client_wait_free bytes of ring space.
  std::atomic<uint64_t> client_wait_seq;
  std::atomic<uint64_t> client_wait_free;
  // First error of an asynchronous call since the frontend last took it (a cudaError_t / CUresult
  // value); the next synchronising call reports it, as CUDA does.
  std::atomic<int32_t> async_error;
  std::atomic<uint32_t> closed;  // the server ended the session
  HostFnQueue host_fn_queues[2];  // indexed by HostFnQueueId
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

// A record as the consumer sees it: a copy of the header, the payload in place.
struct RecordView {
  RecordHeader header;
  const uint8_t* payload = nullptr;
};

class Ring {
 public:
  // Default sizes: 8 MiB of records (H2D chunks of up to 2 MiB), a 2 MiB reply area.
  static constexpr size_t kDefaultDataBytes = 8u << 20;
  static constexpr size_t kDefaultReplyBytes = 2u << 20;
  // The smallest ring either side accepts; every fixed-size call must fit it (checked below).
  static constexpr size_t kMinDataBytes = 64u << 10;
  static constexpr size_t kMinReplyBytes = 64u << 10;

  // A new ring in a fresh memfd. data_bytes: a power of two, 64 KiB to 1 GiB; reply_bytes: a
  // multiple of 4096, at least 64 KiB.
  static Result<std::unique_ptr<Ring>> Create(size_t data_bytes = kDefaultDataBytes,
                                              size_t reply_bytes = kDefaultReplyBytes);
  // Maps a ring received from the peer; checks its magic, version and sizes against the file.
  static Result<std::unique_ptr<Ring>> Attach(int fd);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  int fd() const { return fd_; }
  size_t mapped_bytes() const { return mapped_bytes_; }
  RingHeader* header() { return header_; }
  // The largest payload one record may carry: a quarter of the ring, less the header.
  size_t max_payload() const { return data_bytes_ / 4 - sizeof(RecordHeader); }
  size_t reply_capacity() const { return reply_bytes_ - sizeof(ReplyHeader); }

  // ---- producer (frontend) ----
  // Appends a record of two gathered parts, waiting for space (backpressure). `alive` is asked
  // between waits; when it says false (the server is gone) Write returns Unavailable.
  Status Write(Op op, uint16_t flags, uint64_t seq, const void* part1, size_t len1, const void* part2,
               size_t len2, const std::function<bool()>& alive);
  // Waits until completed_seq >= seq.
  Status WaitCompleted(uint64_t seq, const std::function<bool()>& alive);
  // The reply of the last completed kFlagReply record.
  const ReplyHeader& reply_header() const { return *reinterpret_cast<const ReplyHeader*>(reply_); }
  const uint8_t* reply_payload() const { return reply_ + sizeof(ReplyHeader); }

  // ---- consumer (server) ----
  // The next record, false when the ring is empty; Corruption when the producer wrote something
  // that is not a well-formed record (the session must end).
  Result<bool> Peek(RecordView* view);
  // Releases the record returned by the last Peek (and wakes a producer waiting for space).
  void Release(const RecordView& view);
  // Sleeps until there may be a record, the ring is closed, WakeServer is called, `other_work`
  // (when given) says there is work besides the ring's, or timeout_ms passes. Spins briefly first.
  // `other_work` is asked after the wake-up word is read, so work posted before a WakeServer is
  // never slept through.
  void WaitForWork(int timeout_ms, const std::function<bool()>& other_work = nullptr);
  // Makes the executor's WaitForWork return: it has work besides the ring's records.
  void WakeServer();
  // Publishes completion of `seq`; wakes the frontend when it waits.
  void Complete(uint64_t seq);
  // Writes the reply of record `seq` (result plus up to reply_capacity() bytes).
  void WriteReply(uint64_t seq, int32_t result, const void* data, size_t len);

  // ---- host functions (either side; each queue has one poster and one taker at a time) ----
  // Appends `event` to `queue` and wakes its taker. The poster's count is its own: nothing the
  // peer writes to the queue is read back.
  void PostHostFnEvent(HostFnQueueId queue, const HostFnEvent& event);
  // Copies up to `cap` events posted to `queue` since the last take into `out`; returns how many.
  // A peer that claims more than the queue holds loses the oldest.
  size_t TakeHostFnEvents(HostFnQueueId queue, HostFnEvent* out, size_t cap);
  // Returns when `queue` holds events not taken yet, InterruptHostFnWait is called, or timeout_ms
  // passes. Needs no lock against a concurrent take (a spurious return is harmless).
  void WaitHostFnEvents(HostFnQueueId queue, int timeout_ms);
  // Makes a WaitHostFnEvents on `queue` in another thread return.
  void InterruptHostFnWait(HostFnQueueId queue);
  uint8_t* reply_payload_for_write() { return reply_ + sizeof(ReplyHeader); }
  // Marks the session closed and wakes both sides (a waiting frontend, a sleeping executor).
  void Close();

 private:
  Ring(int fd, void* base, size_t mapped, size_t data_bytes, size_t reply_bytes);
  void WakeClient();

  int fd_;
  void* base_;
  size_t mapped_bytes_;
  size_t data_bytes_;
  size_t reply_bytes_;
  RingHeader* header_;
  uint8_t* data_;
  uint8_t* reply_;
  // Bytes the consumer has released: its own count, never read back from the shared header
  // (the producer can write there).
  uint64_t consumed_ = 0;
  // Host-function events this side posted to and took from each queue (HostFnQueueId).
  uint64_t host_fn_posted_[2] = {0, 0};
  std::atomic<uint64_t> host_fn_taken_[2] = {0, 0};
};

// The largest fixed-size records, at phos's rank limit, fit the smallest ring: an
// ncclCommInitAll's device list in one record, its communicator ids in the reply area.
static_assert(sizeof(NcclInitAllArgs) <= Ring::kMinDataBytes / 4 - sizeof(RecordHeader));
static_assert(kMaxNcclRanks * sizeof(uint64_t) <= Ring::kMinReplyBytes - sizeof(ReplyHeader));

// PHOS_RING_SPIN: how many times a waiting side of a ring spins (a CPU `pause`) before it sleeps
// on the futex, 4,000 (about 100 µs) when unset; 0 sleeps at once. Spinning catches a peer's quick
// answer without a system call; on a host whose cores are all busy it holds the core the peer
// needs, and a lower count serves better. Each process reads its environment once (a bad value is
// logged and the default kept). ParseRingSpin gives the count a setting names: a decimal in
// [0, 1,000,000], nothing else.
std::optional<int> ParseRingSpin(std::string_view setting);

// futex(2) on a word of shared memory (not FUTEX_PRIVATE: the peer is another process).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void FutexWakeAll(std::atomic<uint32_t>* word);

}  // namespace phos::ipc
