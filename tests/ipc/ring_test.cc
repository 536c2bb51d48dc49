#include "phos/ipc/ring.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../testing/wait_until.h"

namespace phos::ipc {
namespace {

constexpr size_t kSmall = 64u << 10;
const std::function<bool()> kAlive = [] { return true; };

std::unique_ptr<Ring> MustCreate(size_t data = kSmall) {
  auto ring = Ring::Create(data, 64u << 10);
  EXPECT_TRUE(ring.ok()) << ring.status().ToString();
  return std::move(*ring);
}

using ::phos::testing::WaitUntil;

TEST(RingTest, RecordsComeOutInOrderAcrossWrapAround) {
  auto ring = MustCreate();
  std::vector<uint8_t> payload(5000);
  uint64_t next_read = 1;
  // ~60 records of 5 KB through a 64 KiB ring: it wraps several times, with padding records.
  for (uint64_t seq = 1; seq <= 60; ++seq) {
    std::memset(payload.data(), static_cast<int>(seq), payload.size());
    ASSERT_TRUE(ring->Write(Op::kMemcpyHtoD, 0, seq, &seq, sizeof(seq), payload.data(), payload.size() - seq, kAlive).ok());
    RecordView view;
    auto got = ring->Peek(&view);
    ASSERT_TRUE(got.ok() && *got);
    ASSERT_EQ(view.header.seq, next_read);
    ASSERT_EQ(view.header.length, sizeof(seq) + payload.size() - seq);
    uint64_t echoed;
    std::memcpy(&echoed, view.payload, sizeof(echoed));
    EXPECT_EQ(echoed, seq);
    EXPECT_EQ(view.payload[sizeof(seq) + 10], static_cast<uint8_t>(seq));
    ring->Release(view);
    ++next_read;
  }
  RecordView view;
  auto empty = ring->Peek(&view);
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(*empty);
}

TEST(RingTest, OversizeWriteIsRefused) {
  auto ring = MustCreate();
  std::vector<uint8_t> big(ring->max_payload() + 1);
  Status s = ring->Write(Op::kMemcpyHtoD, 0, 1, big.data(), big.size(), nullptr, 0, kAlive);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceeds"), std::string::npos);
}

TEST(RingTest, ProducerWaitsForSpaceThenContinues) {
  auto ring = MustCreate();
  std::vector<uint8_t> payload(ring->max_payload());
  std::atomic<int> written{0};
  Status producer_status;  // read after the join
  std::atomic<bool> producer_failed{false};
  std::thread producer([&] {
    for (uint64_t seq = 1; seq <= 12; ++seq) {
      producer_status = ring->Write(Op::kMemset, 0, seq, payload.data(), payload.size(), nullptr, 0, kAlive);
      if (!producer_status.ok()) {
        producer_failed = true;
        return;
      }
      written = static_cast<int>(seq);
    }
  });
  // Four quarter-ring records fill the ring: the producer must be waiting for space, not writing.
  bool waited =
      WaitUntil([&] { return ring->header()->client_waiting.load() != 0 || producer_failed.load(); });
  if (!waited || producer_failed.load()) {
    ring->Close();  // lets a producer still waiting return
    producer.join();
    FAIL() << "the producer never waited for space: " << producer_status.ToString();
  }
  EXPECT_EQ(written.load(), 4);
  uint64_t expect = 1;
  Status peeked;
  while (expect <= 12 && peeked.ok()) {
    RecordView view;
    auto got = ring->Peek(&view);
    if (!got.ok()) {
      peeked = got.status();
      ring->Close();
      break;
    }
    if (!*got) {
      ring->WaitForWork(100);
      continue;
    }
    EXPECT_EQ(view.header.seq, expect++);
    ring->Release(view);
  }
  producer.join();
  ASSERT_TRUE(peeked.ok()) << peeked.ToString();
  EXPECT_TRUE(producer_status.ok()) << producer_status.ToString();
  EXPECT_EQ(written.load(), 12);
}

TEST(RingTest, FutexWakesASleepingServerAndClient) {
  auto ring = MustCreate();
  // Far longer than any scheduling delay: a wait that ends well before it was woken.
  constexpr int kServerWaitMs = 120000;
  Status server_status;  // read after the join
  std::thread server([&] {
    RecordView view;
    while (true) {
      auto got = ring->Peek(&view);
      if (!got.ok()) {
        server_status = got.status();
        return;
      }
      if (*got) break;
      ring->WaitForWork(kServerWaitMs);
    }
    ring->WriteReply(view.header.seq, 7, "pong", 4);
    uint64_t seq = view.header.seq;
    ring->Release(view);
    ring->Complete(seq);
  });
  // The server asleep on the futex first.
  bool asleep = WaitUntil([&] { return ring->header()->server_sleeping.load() != 0; });
  auto start = std::chrono::steady_clock::now();
  Status written = ring->Write(Op::kStreamQuery, kFlagReply, 1, nullptr, 0, nullptr, 0, kAlive);
  Status completed = written.ok() ? ring->WaitCompleted(1, kAlive) : written;
  auto elapsed = std::chrono::steady_clock::now() - start;
  server.join();
  ASSERT_TRUE(asleep) << "the server never went to sleep";
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_TRUE(completed.ok()) << completed.ToString();
  ASSERT_TRUE(server_status.ok()) << server_status.ToString();
  // Woken, not timed out: a timed-out wait would have taken the whole kServerWaitMs.
  EXPECT_LT(elapsed, std::chrono::milliseconds(kServerWaitMs / 2));
  EXPECT_EQ(ring->reply_header().result, 7);
  EXPECT_EQ(std::memcmp(ring->reply_payload(), "pong", 4), 0);
}

// A host-function queue: events come out in the order posted, across the queue's wrap, to the
// peer's mapping; a waiting taker is woken by a post, and by an interruption.
TEST(RingTest, HostFnEventsReachThePeerInOrder) {
  constexpr auto kQueue = HostFnQueueId::kToFrontend;
  auto ring = MustCreate();
  auto peer = Ring::Attach(dup(ring->fd()));
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  std::vector<HostFnEvent> got(kMaxHostFnSlots);
  uint32_t next = 0;
  // Three rounds of most of the queue: the third wraps.
  for (int round = 0; round < 3; ++round) {
    const uint32_t n = kMaxHostFnSlots - 5;
    for (uint32_t i = 0; i < n; ++i) ring->PostHostFnEvent(kQueue, {(next + i) % kMaxHostFnSlots, static_cast<int32_t>(round)});
    size_t taken = (*peer)->TakeHostFnEvents(kQueue, got.data(), got.size());
    ASSERT_EQ(taken, n);
    for (uint32_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i].slot, (next + i) % kMaxHostFnSlots);
      EXPECT_EQ(got[i].result, round);
    }
    next += n;
  }
  EXPECT_EQ((*peer)->TakeHostFnEvents(kQueue, got.data(), got.size()), 0u);

  // Far longer than any scheduling delay: a wait that ends well before it was woken.
  constexpr int kWaitMs = 120000;
  std::atomic<bool> woken{false};
  std::thread waiter([&] {
    (*peer)->WaitHostFnEvents(kQueue, kWaitMs);
    woken = true;
  });
  ring->PostHostFnEvent(kQueue, {7, 0});
  waiter.join();
  ASSERT_EQ((*peer)->TakeHostFnEvents(kQueue, got.data(), 1), 1u);
  EXPECT_EQ(got[0].slot, 7u);
  woken = false;
  std::thread interrupted([&] {
    (*peer)->WaitHostFnEvents(kQueue, kWaitMs);
    woken = true;
  });
  // Interrupted (again, until the waiter was asleep when it came): it returns long before its
  // wait would have ended, with nothing to take.
  EXPECT_TRUE(WaitUntil([&] {
    (*peer)->InterruptHostFnWait(kQueue);
    return woken.load();
  }));
  interrupted.join();
  EXPECT_EQ((*peer)->TakeHostFnEvents(kQueue, got.data(), 1), 0u);
}

// The taker keeps its own count: a poster that claims to be behind it, or far ahead of the
// queue, costs the taker at most one queue's worth of events, never a read outside the queue.
TEST(RingTest, HostFnTakerBoundsWhatAPeerClaims) {
  constexpr auto kQueue = HostFnQueueId::kToServer;
  auto ring = MustCreate();
  std::vector<HostFnEvent> got(2 * kMaxHostFnSlots);
  ring->PostHostFnEvent(kQueue, {1, 0});
  ASSERT_EQ(ring->TakeHostFnEvents(kQueue, got.data(), got.size()), 1u);
  HostFnQueue& shared = ring->header()->host_fn_queues[static_cast<size_t>(kQueue)];
  shared.posted.store(uint64_t{1} << 62);
  EXPECT_EQ(ring->TakeHostFnEvents(kQueue, got.data(), got.size()), kMaxHostFnSlots);
  shared.posted.store(3);
  EXPECT_EQ(ring->TakeHostFnEvents(kQueue, got.data(), got.size()), 3u);
}

TEST(RingTest, SpinSettingIsADecimalCountUpToAMillion) {
  EXPECT_EQ(ParseRingSpin("0"), 0);
  EXPECT_EQ(ParseRingSpin("250"), 250);
  EXPECT_EQ(ParseRingSpin("1000000"), 1000000);
  // Anything else names no count (the process keeps the default): never a wait that spins for
  // minutes, nor a count read from part of the setting.
  for (const char* bad : {"", "-1", "1000001", "99999999999", "12x", " 7", "0x10", "ten"}) {
    EXPECT_EQ(ParseRingSpin(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(RingTest, AttachSeesTheSameRingInAnotherProcess) {
  auto ring = MustCreate();
  pid_t child = fork();
  if (child == 0) {
    auto peer = Ring::Attach(dup(ring->fd()));
    if (!peer.ok()) _exit(2);
    uint64_t v = 42;
    _exit((*peer)->Write(Op::kMemFree, 0, 1, &v, sizeof(v), nullptr, 0, kAlive).ok() ? 0 : 3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  RecordView view;
  auto got = ring->Peek(&view);
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ(view.header.opcode, static_cast<uint16_t>(Op::kMemFree));
}

TEST(RingTest, TruncatedOrOversizeRecordIsCorruption) {
  auto ring = MustCreate();
  // A header claiming more payload than was published. The records start after the header's
  // pages: the mapping is those, the records and the reply area.
  auto* data = reinterpret_cast<uint8_t*>(ring->header()) + ring->mapped_bytes() - kSmall - (64u << 10);
  RecordHeader lie{static_cast<uint16_t>(Op::kMemset), 0, 1u << 20, 1};
  std::memcpy(data, &lie, sizeof(lie));
  ring->header()->produced.store(sizeof(lie) + 16);
  RecordView view;
  auto got = ring->Peek(&view);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find("1048576"), std::string::npos) << got.status().message();

  // A producer offset beyond the ring.
  ring->header()->produced.store(ring->header()->consumed.load() + (1u << 30));
  got = ring->Peek(&view);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);

  // An unknown opcode.
  RecordHeader unknown{999, 0, 0, 1};
  std::memcpy(data, &unknown, sizeof(unknown));
  ring->header()->produced.store(sizeof(unknown));
  got = ring->Peek(&view);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("opcode 999"), std::string::npos);
}

TEST(RingTest, AttachRefusesBadSizesAndVersions) {
  auto ring = MustCreate();
  ring->header()->version = kWireVersion + 1;
  auto bad = Ring::Attach(dup(ring->fd()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("version"), std::string::npos);
  ring->header()->version = kWireVersion;
  ring->header()->data_bytes = 1u << 30;
  bad = Ring::Attach(dup(ring->fd()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("do not match"), std::string::npos);
  EXPECT_FALSE(Ring::Create(100000, 64u << 10).ok());
}

TEST(RingTest, ClosedRingStopsAWaitingProducer) {
  auto ring = MustCreate();
  ASSERT_TRUE(ring->Write(Op::kMemFree, kFlagReply, 1, nullptr, 0, nullptr, 0, kAlive).ok());
  std::thread closer([&] {
    // Closed while the client waits, whenever that wait starts.
    WaitUntil([&] { return ring->header()->client_waiting.load() != 0; });
    ring->Close();
  });
  Status s = ring->WaitCompleted(1, kAlive);
  closer.join();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
}

// A wait that only a wake can end (kForever ms is some 24 days): the test returning at all is the
// assertion, and a regression hangs until ctest's timeout rather than reading a clock.
constexpr int kForever = std::numeric_limits<int>::max();

TEST(RingTest, CloseWakesASleepingServer) {
  auto ring = MustCreate();
  std::atomic<bool> stop{false};
  std::atomic<int> wakes{0};
  std::thread server([&] {
    while (!stop.load()) {
      ring->WaitForWork(kForever);
      ++wakes;
    }
  });
  bool asleep = WaitUntil([&] { return ring->header()->server_sleeping.load() != 0; });
  stop.store(true);
  ring->Close();  // what a session's end does before it joins its executor
  server.join();
  ASSERT_TRUE(asleep) << "the server never went to sleep";
  EXPECT_GE(wakes.load(), 1);
}

// The close that lands between the executor's last look for work and its sleep: the sleep must not
// start (it would last its whole timeout, and a session's end with it).
TEST(RingTest, WaitForWorkOnAClosedRingReturnsAtOnce) {
  auto ring = MustCreate();
  ring->Close();
  ring->WaitForWork(kForever);  // returns: nothing else could wake it
  EXPECT_NE(ring->header()->closed.load(), 0u);
}

// What a capture does to an idle session: its task is posted beside the ring, and the executor,
// asleep for want of records, must take it now rather than at the end of its sleep.
TEST(RingTest, WakeServerWakesASleepingServer) {
  auto ring = MustCreate();
  std::atomic<bool> posted{false};
  std::thread server([&] {
    while (!posted.load()) ring->WaitForWork(kForever, [&] { return posted.load(); });
  });
  bool asleep = WaitUntil([&] { return ring->header()->server_sleeping.load() != 0; });
  posted.store(true);
  ring->WakeServer();
  server.join();  // returns: nothing else could wake it
  ASSERT_TRUE(asleep) << "the server never went to sleep";
}

// Work posted after the executor's last look and before its sleep: the sleep must not start.
TEST(RingTest, WaitForWorkWithOtherWorkReturnsAtOnce) {
  auto ring = MustCreate();
  int asked = 0;
  ring->WaitForWork(kForever, [&] { return ++asked > 0; });  // returns: nothing else could wake it
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(ring->header()->server_sleeping.load(), 0u);
}

TEST(RingTest, PeerCannotResizeTheRing) {
  auto ring = MustCreate();
  // What the function process receives: the same file through another descriptor.
  int peer_fd = dup(ring->fd());
  ASSERT_GE(peer_fd, 0);
  const int seals = fcntl(peer_fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(ftruncate(peer_fd, 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(peer_fd, static_cast<off_t>(ring->mapped_bytes()) * 2), 0);
  EXPECT_NE(fcntl(peer_fd, F_ADD_SEALS, F_SEAL_WRITE), 0);  // no seal can be added or removed either
  close(peer_fd);
  // The consumer still reads every page.
  uint64_t v = 7;
  ASSERT_TRUE(ring->Write(Op::kMemFree, 0, 1, &v, sizeof(v), nullptr, 0, kAlive).ok());
  RecordView view;
  auto got = ring->Peek(&view);
  ASSERT_TRUE(got.ok() && *got);
}

TEST(RingTest, ConsumerIgnoresAProducerRewritingItsOffset) {
  auto ring = MustCreate();
  uint64_t v = 1;
  ASSERT_TRUE(ring->Write(Op::kMemFree, 0, 1, &v, sizeof(v), nullptr, 0, kAlive).ok());
  RecordView view;
  auto got = ring->Peek(&view);
  ASSERT_TRUE(got.ok() && *got);
  ring->Release(view);
  const uint64_t released = ring->header()->consumed.load();
  // A hostile producer moves the shared consumer offset back to replay a record, then forward
  // past what it published: the consumer keeps its own count and sees an empty ring.
  ring->header()->consumed.store(0);
  got = ring->Peek(&view);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  ring->header()->consumed.store(released + 4096);
  got = ring->Peek(&view);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  // The next record written from the true offset is read, once.
  ring->header()->consumed.store(released);
  ASSERT_TRUE(ring->Write(Op::kMemFree, 0, 2, &v, sizeof(v), nullptr, 0, kAlive).ok());
  got = ring->Peek(&view);
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ(view.header.seq, 2u);
}

}  // namespace
}  // namespace phos::ipc
