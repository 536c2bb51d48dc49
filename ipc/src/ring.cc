#include "phos/ipc/ring.h"

#include <algorithm>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <optional>
#include <string_view>

#include <fmt/core.h>

#include "phos/base/log.h"

namespace phos::ipc {
namespace {

// The header's pages: RingHeader, the host-function queue included, rounded up to a page.
constexpr size_t kHeaderBytes = (sizeof(RingHeader) + 4095) / 4096 * 4096;
// Spinning before sleeping, by default: long enough to catch the peer's next call in a tight
// loop, short enough not to starve it on a two-core machine. What it lasts depends on the CPU's
// `pause`: 4,000 of them take about 100 µs on the AMD EPYC hosts this was measured on, and about
// twice that where a `pause` takes some 140 cycles (Intel's since Skylake). PHOS_RING_SPIN
// overrides it for a process.
constexpr int kDefaultSpinIterations = 4000;
constexpr int kMaxSpinIterations = 1'000'000;

// Read once: every wait of the process spins the same.
int SpinIterations() {
  static const int spins = [] {
    const char* setting = std::getenv("PHOS_RING_SPIN");
    if (setting == nullptr) return kDefaultSpinIterations;
    std::optional<int> count = ParseRingSpin(setting);
    if (!count) {
      PHOS_LOG(Warn, "ipc", "PHOS_RING_SPIN='{}' is not a count in [0, {}]: the rings' waits spin {} times",
               setting, kMaxSpinIterations, kDefaultSpinIterations);
    }
    return count.value_or(kDefaultSpinIterations);
  }();
  return spins;
}

inline void CpuRelax() { __builtin_ia32_pause(); }

size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

std::optional<int> ParseRingSpin(std::string_view setting) {
  const char* end = setting.data() + setting.size();
  int count = 0;
  auto [last, ec] = std::from_chars(setting.data(), end, count);
  if (ec != std::errc() || last != end || count < 0 || count > kMaxSpinIterations) return std::nullopt;
  return count;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

Ring::Ring(int fd, void* base, size_t mapped, size_t data_bytes, size_t reply_bytes)
    : fd_(fd),
      base_(base),
      mapped_bytes_(mapped),
      data_bytes_(data_bytes),
      reply_bytes_(reply_bytes),
      header_(static_cast<RingHeader*>(base)),
      data_(static_cast<uint8_t*>(base) + kHeaderBytes),
      reply_(static_cast<uint8_t*>(base) + kHeaderBytes + data_bytes) {}

Ring::~Ring() {
  munmap(base_, mapped_bytes_);
  close(fd_);
}

Result<std::unique_ptr<Ring>> Ring::Create(size_t data_bytes, size_t reply_bytes) {
  if (data_bytes < kMinDataBytes || data_bytes > (1u << 30) || (data_bytes & (data_bytes - 1)) != 0) {
    return Status::InvalidArgument(fmt::format("ring size {} is not a power of two in [64 KiB, 1 GiB]", data_bytes));
  }
  if (reply_bytes < kMinReplyBytes || reply_bytes % 4096 != 0) {
    return Status::InvalidArgument(fmt::format("reply area {} is not a multiple of 4096 of at least 64 KiB", reply_bytes));
  }
  int fd = memfd_create("phos-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::FromErrno(errno, "memfd_create(phos-ring)");
  size_t total = kHeaderBytes + data_bytes + reply_bytes;
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    Status s = Status::FromErrno(errno, "ftruncate(phos-ring)");
    close(fd);
    return s;
  }
  // The peer gets this fd: a peer that could shrink the file would make the server's next touch
  // of the lost pages a SIGBUS. Sealed before anyone else sees it, and the seals themselves too.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status s = Status::FromErrno(errno, "fcntl(phos-ring, F_ADD_SEALS)");
    close(fd);
    return s;
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    Status s = Status::FromErrno(errno, "mmap(phos-ring)");
    close(fd);
    return s;
  }
  auto* h = new (base) RingHeader{};
  h->magic = kRingMagic;
  h->version = kWireVersion;
  h->data_bytes = data_bytes;
  h->reply_bytes = reply_bytes;
  return std::unique_ptr<Ring>(new Ring(fd, base, total, data_bytes, reply_bytes));
}

Result<std::unique_ptr<Ring>> Ring::Attach(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = Status::FromErrno(errno, "fstat(ring)");
    close(fd);
    return s;
  }
  size_t total = static_cast<size_t>(st.st_size);
  auto fail = [fd](Status s) {
    close(fd);
    return s;
  };
  if (total < kHeaderBytes + (128u << 10)) return fail(Status::InvalidArgument(fmt::format("ring file of {} bytes is too small", total)));
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(Status::FromErrno(errno, "mmap(ring)"));
  const auto* h = static_cast<const RingHeader*>(base);
  uint64_t data_bytes = h->data_bytes;
  uint64_t reply_bytes = h->reply_bytes;
  Status bad;
  if (h->magic != kRingMagic) {
    bad = Status::InvalidArgument(fmt::format("ring magic {:#x}, expected {:#x}", h->magic, kRingMagic));
  } else if (h->version != kWireVersion) {
    bad = Status::InvalidArgument(fmt::format("ring version {}, this side speaks {}", h->version, kWireVersion));
  } else if ((data_bytes & (data_bytes - 1)) != 0 || data_bytes < kMinDataBytes || reply_bytes < kMinReplyBytes ||
             kHeaderBytes + data_bytes + reply_bytes != total) {
    bad = Status::InvalidArgument(fmt::format("ring sizes {} + {} do not match its file of {} bytes", data_bytes, reply_bytes, total));
  }
  if (!bad.ok()) {
    munmap(base, total);
    return fail(bad);
  }
  return std::unique_ptr<Ring>(new Ring(fd, base, total, data_bytes, reply_bytes));
}

Status Ring::Write(Op op, uint16_t flags, uint64_t seq, const void* part1, size_t len1, const void* part2,
                   size_t len2, const std::function<bool()>& alive) {
  size_t length = len1 + len2;
  if (length > max_payload()) {
    return Status::InvalidArgument(fmt::format("record of {} bytes exceeds the ring's limit of {}", length, max_payload()));
  }
  size_t need = sizeof(RecordHeader) + AlignUp(length, kRecordAlign);
  uint64_t produced = header_->produced.load(std::memory_order_relaxed);
  size_t pos = produced & (data_bytes_ - 1);
  size_t to_end = data_bytes_ - pos;
  size_t pad = need > to_end ? to_end : 0;
  const int spin_limit = SpinIterations();
  int spins = 0;
  while (data_bytes_ - (produced - header_->consumed.load(std::memory_order_acquire)) < need + pad) {
    if (header_->closed.load(std::memory_order_acquire) != 0) return Status::Unavailable("the GPU session was closed by phosd");
    if (spins++ < spin_limit) {
      CpuRelax();
      continue;
    }
    uint32_t word = header_->client_futex.load(std::memory_order_seq_cst);
    // Sleep until a quarter of the ring is free, not just this record's bytes: waking for every
    // released record would cost a system call per record on both sides.
    header_->client_wait_seq.store(0, std::memory_order_relaxed);
    header_->client_wait_free.store(std::max<uint64_t>(need + pad, data_bytes_ / 4), std::memory_order_relaxed);
    header_->client_waiting.store(1, std::memory_order_seq_cst);
    if (data_bytes_ - (produced - header_->consumed.load(std::memory_order_seq_cst)) < need + pad) {
      FutexWait(&header_->client_futex, word, 100);
    }
    header_->client_waiting.store(0, std::memory_order_relaxed);
    if (!alive()) return Status::Unavailable("phosd went away while the ring was full");
  }
  if (pad != 0) {
    RecordHeader filler{static_cast<uint16_t>(Op::kPad), 0, static_cast<uint32_t>(pad - sizeof(RecordHeader)), 0};
    std::memcpy(data_ + pos, &filler, sizeof(filler));
    produced += pad;
    pos = 0;
  }
  RecordHeader rh{static_cast<uint16_t>(op), flags, static_cast<uint32_t>(length), seq};
  std::memcpy(data_ + pos, &rh, sizeof(rh));
  if (len1 != 0) std::memcpy(data_ + pos + sizeof(rh), part1, len1);
  if (len2 != 0) std::memcpy(data_ + pos + sizeof(rh) + len1, part2, len2);
  header_->submitted_seq.store(seq, std::memory_order_relaxed);
  header_->produced.store(produced + need, std::memory_order_seq_cst);
  if (header_->server_sleeping.load(std::memory_order_seq_cst) != 0) WakeServer();
  return Status::Ok();
}

Status Ring::WaitCompleted(uint64_t seq, const std::function<bool()>& alive) {
  const int spin_limit = SpinIterations();
  int spins = 0;
  while (header_->completed_seq.load(std::memory_order_acquire) < seq) {
    if (header_->closed.load(std::memory_order_acquire) != 0) return Status::Unavailable("the GPU session was closed by phosd");
    if (spins++ < spin_limit) {
      CpuRelax();
      continue;
    }
    uint32_t word = header_->client_futex.load(std::memory_order_seq_cst);
    header_->client_wait_free.store(0, std::memory_order_relaxed);
    header_->client_wait_seq.store(seq, std::memory_order_relaxed);
    header_->client_waiting.store(1, std::memory_order_seq_cst);
    if (header_->completed_seq.load(std::memory_order_seq_cst) < seq) FutexWait(&header_->client_futex, word, 100);
    header_->client_waiting.store(0, std::memory_order_relaxed);
    if (!alive()) return Status::Unavailable("phosd went away during a call");
  }
  return Status::Ok();
}

Result<bool> Ring::Peek(RecordView* view) {
  // The consumer's offset is its own (consumed_): the shared copy is only published for the
  // producer, which may rewrite it.
  uint64_t consumed = consumed_;
  uint64_t produced = header_->produced.load(std::memory_order_acquire);
  while (true) {
    if (produced == consumed) return false;
    uint64_t available = produced - consumed;
    if (available > data_bytes_ || available % kRecordAlign != 0) {
      return Status::Corruption(fmt::format("ring producer offset is {} bytes ahead of the consumer (ring of {})", available, data_bytes_));
    }
    size_t pos = consumed & (data_bytes_ - 1);
    size_t to_end = data_bytes_ - pos;
    std::memcpy(&view->header, data_ + pos, sizeof(RecordHeader));
    const RecordHeader& h = view->header;
    if (h.opcode == static_cast<uint16_t>(Op::kPad)) {
      if (h.length + sizeof(RecordHeader) != to_end || available < to_end) {
        return Status::Corruption(fmt::format("ring padding of {} bytes where {} remain before the end", h.length, to_end));
      }
      consumed += to_end;
      consumed_ = consumed;
      header_->consumed.store(consumed, std::memory_order_release);
      continue;
    }
    if (h.opcode >= static_cast<uint16_t>(Op::kOpCount)) {
      return Status::Corruption(fmt::format("unknown opcode {} in ring record {}", h.opcode, h.seq));
    }
    size_t size = sizeof(RecordHeader) + AlignUp(h.length, kRecordAlign);
    if (h.length > max_payload() || size > to_end || size > available) {
      return Status::Corruption(fmt::format("ring record {} claims {} payload bytes; at most {} fit", h.seq, h.length,
                                            std::min<size_t>(max_payload(), std::min<size_t>(to_end, available) - sizeof(RecordHeader))));
    }
    view->payload = data_ + pos + sizeof(RecordHeader);
    return true;
  }
}

void Ring::Release(const RecordView& view) {
  uint64_t size = sizeof(RecordHeader) + AlignUp(view.header.length, kRecordAlign);
  consumed_ += size;
  header_->consumed.store(consumed_, std::memory_order_seq_cst);
  WakeClient();
}

void Ring::WakeClient() {
  if (header_->client_waiting.load(std::memory_order_seq_cst) == 0) return;
  // Only when what the client waits for has happened (see RingHeader::client_wait_seq).
  uint64_t free_bytes = data_bytes_ - (header_->produced.load(std::memory_order_seq_cst) - consumed_);
  bool space_ready = free_bytes >= header_->client_wait_free.load(std::memory_order_seq_cst);
  bool seq_ready = header_->completed_seq.load(std::memory_order_seq_cst) >=
                   header_->client_wait_seq.load(std::memory_order_seq_cst);
  if (space_ready && seq_ready) {
    header_->client_futex.fetch_add(1, std::memory_order_seq_cst);
    FutexWakeAll(&header_->client_futex);
  }
}

void Ring::PostHostFnEvent(HostFnQueueId queue, const HostFnEvent& event) {
  const auto q = static_cast<size_t>(queue);
  HostFnQueue& shared = header_->host_fn_queues[q];
  shared.events[host_fn_posted_[q] % kMaxHostFnSlots] = event;
  shared.posted.store(++host_fn_posted_[q], std::memory_order_seq_cst);
  shared.futex.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&shared.futex);
}

size_t Ring::TakeHostFnEvents(HostFnQueueId queue, HostFnEvent* out, size_t cap) {
  const auto q = static_cast<size_t>(queue);
  HostFnQueue& shared = header_->host_fn_queues[q];
  const uint64_t posted = shared.posted.load(std::memory_order_seq_cst);
  uint64_t taken = host_fn_taken_[q].load(std::memory_order_relaxed);
  // The count is the peer's: one behind what was taken, or further ahead than the queue holds,
  // costs at most one queue's worth of events.
  if (posted < taken || posted - taken > kMaxHostFnSlots) taken = posted - std::min<uint64_t>(posted, kMaxHostFnSlots);
  size_t n = 0;
  for (; n < cap && taken < posted; ++n, ++taken) out[n] = shared.events[taken % kMaxHostFnSlots];
  host_fn_taken_[q].store(taken, std::memory_order_relaxed);
  return n;
}

void Ring::WaitHostFnEvents(HostFnQueueId queue, int timeout_ms) {
  const auto q = static_cast<size_t>(queue);
  HostFnQueue& shared = header_->host_fn_queues[q];
  // The word before the count: a post after this read moves the word, so the wait returns.
  const uint32_t word = shared.futex.load(std::memory_order_seq_cst);
  if (shared.posted.load(std::memory_order_seq_cst) != host_fn_taken_[q].load(std::memory_order_relaxed)) return;
  FutexWait(&shared.futex, word, timeout_ms);
}

void Ring::InterruptHostFnWait(HostFnQueueId queue) {
  HostFnQueue& shared = header_->host_fn_queues[static_cast<size_t>(queue)];
  shared.futex.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&shared.futex);
}

void Ring::WaitForWork(int timeout_ms, const std::function<bool()>& other_work) {
  for (int i = 0, spin_limit = SpinIterations(); i < spin_limit; ++i) {
    if (header_->produced.load(std::memory_order_acquire) != consumed_) return;
    CpuRelax();
  }
  uint32_t word = header_->server_futex.load(std::memory_order_seq_cst);
  header_->server_sleeping.store(1, std::memory_order_seq_cst);
  // Close() marks the ring closed before it moves the word: a close that came before the word was
  // read is seen here, one after it makes the wait return at once.
  if (header_->produced.load(std::memory_order_seq_cst) == consumed_ &&
      header_->closed.load(std::memory_order_seq_cst) == 0 && !(other_work && other_work())) {
    FutexWait(&header_->server_futex, word, timeout_ms);
  }
  header_->server_sleeping.store(0, std::memory_order_relaxed);
}

void Ring::Complete(uint64_t seq) {
  header_->completed_seq.store(seq, std::memory_order_seq_cst);
  WakeClient();
}

void Ring::WriteReply(uint64_t seq, int32_t result, const void* data, size_t len) {
  if (len > reply_capacity()) len = reply_capacity();
  if (len != 0 && data != reply_payload_for_write()) std::memcpy(reply_payload_for_write(), data, len);
  ReplyHeader rh{result, static_cast<uint32_t>(len), seq};
  std::memcpy(reply_, &rh, sizeof(rh));
}

void Ring::Close() {
  header_->closed.store(1, std::memory_order_seq_cst);
  header_->client_futex.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&header_->client_futex);
  // And the executor, asleep in WaitForWork: a session's end must not wait out its sleep.
  WakeServer();
}

void Ring::WakeServer() {
  header_->server_futex.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&header_->server_futex);
}

}  // namespace phos::ipc
