#include "phos/store/reader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "tier_test_util.h"

namespace phos::store {
namespace {

using namespace std::chrono_literals;
using testing::CountingAllocator;
using testing::MakeManifest;
using testing::MemoryChunkSource;

constexpr size_t kChunk = 4096;

// Records deliveries and reassembles the buffers they carry.
struct Sink {
  explicit Sink(const Manifest& m) {
    for (const Buffer& b : m.buffers) buffers.emplace_back(b.size, '\0');
  }
  DeliverFn Fn() {
    return [this](const ChunkDelivery& d) {
      std::memcpy(buffers[d.buffer_index].data() + d.offset, d.data, d.size);
      std::lock_guard lock(mu);
      arrivals.push_back(d.buffer_index);
      return Status::Ok();
    };
  }
  std::mutex mu;
  std::vector<std::string> buffers;
  std::vector<uint32_t> arrivals;  // buffer index of each delivery, in order
};

std::unique_ptr<ReaderPool> MakePool(int threads) {
  auto pool = ReaderPool::Create({.io_threads = threads});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(*pool);
}

TEST(ReaderTest, FirstTouchOrderPutsUnrankedLastAndTiesByAddress) {
  Manifest m;
  auto add = [&](int rank, uint64_t addr) {
    Buffer& b = m.buffers.emplace_back();
    b.first_touch_rank = rank;
    b.device_address = addr;
  };
  add(-1, 0x1000);
  add(2, 0x2000);
  add(0, 0x9000);
  add(0, 0x3000);
  add(-1, 0x500);
  EXPECT_EQ(FirstTouchOrder(m), (std::vector<uint32_t>{3, 2, 1, 4, 0}));
}

TEST(ReaderTest, StreamsEveryChunkInFirstTouchOrder) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {3 * kChunk, 2 * kChunk + 100, kChunk}, {2, -1, 0}, kChunk, &contents);
  auto pool = MakePool(1);
  Sink sink(m);
  auto reader = SnapshotReader::Start(pool.get(), m, &source, {.staging_bytes = kChunk}, sink.Fn());
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE((*reader)->Wait().ok());
  EXPECT_TRUE((*reader)->Done());
  EXPECT_EQ(sink.buffers, contents);
  EXPECT_EQ(sink.arrivals, (std::vector<uint32_t>{2, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ((*reader)->delivered_chunks(), 7u);
  EXPECT_EQ((*reader)->delivered_bytes(), 6 * kChunk + 100);
}

TEST(ReaderTest, ExplicitOrderMayBeASubset) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {kChunk, kChunk, kChunk}, {0, 1, 2}, kChunk, &contents);
  auto pool = MakePool(1);
  Sink sink(m);
  auto reader = SnapshotReader::Start(pool.get(), m, &source,
                                      {.buffer_order = {2, 0}, .staging_bytes = kChunk}, sink.Fn());
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->Wait().ok());
  EXPECT_EQ(sink.arrivals, (std::vector<uint32_t>{2, 0}));
}

TEST(ReaderTest, PrioritizeMidStreamMakesThatBufferArriveFirst) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  constexpr int kPerBuffer = 6;
  Manifest m = MakeManifest(
      source, {kPerBuffer * kChunk, kPerBuffer * kChunk, kPerBuffer * kChunk, kPerBuffer * kChunk},
      {0, 1, 2, 3}, kChunk, &contents);
  auto pool = MakePool(2);
  Sink sink(m);
  // One staging buffer: one chunk in flight at a time, so the order of arrivals is the order in
  // which chunks were taken from the queue, whatever the scheduler does with the I/O threads.
  constexpr size_t kStaging = 1;
  // The third delivery holds its I/O thread (and the one staging buffer) until the test has
  // reordered the queue, so the call lands mid-stream however loaded the host is.
  std::condition_variable cv;
  bool prioritized = false;
  DeliverFn record = sink.Fn();
  auto reader = SnapshotReader::Start(pool.get(), m, &source, {.staging_bytes = kStaging * kChunk},
                                      [&](const ChunkDelivery& d) {
                                        Status s = record(d);
                                        std::unique_lock lock(sink.mu);
                                        if (sink.arrivals.size() == 3) {
                                          cv.notify_all();
                                          cv.wait(lock, [&] { return prioritized; });
                                        }
                                        return s;
                                      });
  ASSERT_TRUE(reader.ok());
  size_t at = 0;
  {
    std::unique_lock lock(sink.mu);
    cv.wait(lock, [&] { return sink.arrivals.size() >= 3; });
    at = sink.arrivals.size();
    ASSERT_TRUE((*reader)->Prioritize(3).ok());
    prioritized = true;
    cv.notify_all();
  }
  ASSERT_TRUE((*reader)->Wait().ok());
  EXPECT_EQ(sink.buffers, contents);
  ASSERT_EQ(sink.arrivals.size(), 4u * kPerBuffer);
  ASSERT_EQ(at, 3u) << "the held delivery let another chunk through";
  for (size_t i = 0; i < at; ++i) ASSERT_NE(sink.arrivals[i], 3u) << "buffer 3 is last in first-touch order";
  // Every chunk of buffer 3 next, before any other buffer's remaining chunks.
  for (size_t i = at; i < at + kPerBuffer; ++i) {
    EXPECT_EQ(sink.arrivals[i], 3u) << "arrival " << i << ", prioritized after " << at << " arrivals";
  }
  EXPECT_TRUE((*reader)->Prioritize(3).ok()) << "a finished buffer is fine";
  EXPECT_EQ((*reader)->Prioritize(4).code(), StatusCode::kInvalidArgument);
}

TEST(ReaderTest, CancelStopsStreaming) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {40 * kChunk}, {0}, kChunk, &contents);
  auto pool = MakePool(2);
  Sink sink(m);
  // Deliveries from the second on hold their I/O thread until the test has cancelled, so the
  // cancel lands mid-stream however loaded the host is.
  std::condition_variable cv;
  bool cancelled = false;
  DeliverFn record = sink.Fn();
  auto reader = SnapshotReader::Start(pool.get(), m, &source, {.staging_bytes = 2 * kChunk},
                                      [&](const ChunkDelivery& d) {
                                        Status s = record(d);
                                        std::unique_lock lock(sink.mu);
                                        if (sink.arrivals.size() >= 2) {
                                          cv.notify_all();
                                          cv.wait(lock, [&] { return cancelled; });
                                        }
                                        return s;
                                      });
  ASSERT_TRUE(reader.ok());
  {
    std::unique_lock lock(sink.mu);
    cv.wait(lock, [&] { return sink.arrivals.size() >= 2; });
    (*reader)->Cancel();
    cancelled = true;
    cv.notify_all();
  }
  Status s = (*reader)->Wait();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("cancelled"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'fn' v3"), std::string::npos) << s.message();
  EXPECT_LT((*reader)->delivered_chunks(), 40u);
  EXPECT_TRUE((*reader)->Done());
}

TEST(ReaderTest, CorruptChunkFailsNamingSnapshotBufferAndChunk) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {2 * kChunk, 4 * kChunk}, {0, 1}, kChunk, &contents);
  const ChunkId bad = m.buffers[1].chunks[2].id;
  source.Corrupt(bad);
  auto pool = MakePool(2);
  Sink sink(m);
  auto reader = SnapshotReader::Start(pool.get(), m, &source,
                                      {.snapshot_name = "mlp@7", .staging_bytes = kChunk}, sink.Fn());
  ASSERT_TRUE(reader.ok());
  Status s = (*reader)->Wait();
  ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("snapshot mlp@7"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("buffer 1 ('b1') chunk 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(bad.ToHex()), std::string::npos) << s.message();
}

TEST(ReaderTest, DeliveryFailureStopsTheReader) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {8 * kChunk}, {0}, kChunk, &contents);
  auto pool = MakePool(1);
  auto reader =
      SnapshotReader::Start(pool.get(), m, &source, {.staging_bytes = kChunk}, [](const ChunkDelivery& d) {
        return d.chunk_index == 3 ? Status::DeviceError("copy failed") : Status::Ok();
      });
  ASSERT_TRUE(reader.ok());
  Status s = (*reader)->Wait();
  EXPECT_EQ(s.code(), StatusCode::kDeviceError);
  EXPECT_NE(s.message().find("chunk 3"), std::string::npos) << s.message();
  EXPECT_EQ((*reader)->delivered_chunks(), 3u);
}

TEST(ReaderTest, SeveralReadersShareThePoolAndTheTier) {
  MemoryChunkSource source;
  std::vector<std::vector<std::string>> contents(3);
  std::vector<Manifest> manifests;
  for (uint32_t i = 0; i < 3; ++i) {
    manifests.push_back(
        MakeManifest(source, {5 * kChunk, 3 * kChunk + 7}, {1, 0}, kChunk, &contents[i], i + 1));
  }
  auto tier = DramTier::Create({.capacity_bytes = 8 * kChunk, .slot_bytes = kChunk},
                               std::make_unique<MmapAllocator>(), &source);
  ASSERT_TRUE(tier.ok());
  auto pool = MakePool(2);
  std::vector<std::unique_ptr<Sink>> sinks;
  std::vector<std::unique_ptr<SnapshotReader>> readers;
  for (uint32_t i = 0; i < 3; ++i) {
    sinks.push_back(std::make_unique<Sink>(manifests[i]));
    auto r = SnapshotReader::Start(pool.get(), manifests[i], tier->get(), {.staging_bytes = 2 * kChunk},
                                   sinks[i]->Fn());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    readers.push_back(std::move(*r));
  }
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(readers[i]->Wait().ok());
    EXPECT_EQ(sinks[i]->buffers, contents[i]) << "reader " << i;
  }
  EXPECT_EQ((*tier)->Stats().leased_chunks, 0u);
}

TEST(ReaderTest, StagingBoundIsRespected) {
  MemoryChunkSource source;
  source.set_delay(1ms);
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {16 * kChunk}, {0}, kChunk, &contents);
  auto pool = MakePool(4);
  CountingAllocator staging;
  std::atomic<int> in_callback{0}, most{0};
  auto reader = SnapshotReader::Start(pool.get(), m, &source,
                                      {.staging_bytes = 2 * kChunk + 100, .staging_allocator = &staging},
                                      [&](const ChunkDelivery& d) {
                                        int now = ++in_callback;
                                        most = std::max(most.load(), now);
                                        EXPECT_TRUE(staging.InLast(d.data));
                                        std::this_thread::sleep_for(2ms);
                                        --in_callback;
                                        return Status::Ok();
                                      });
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->staging_bytes(), 2 * kChunk);
  ASSERT_TRUE((*reader)->Wait().ok());
  EXPECT_LE(staging.peak(), 2 * kChunk);
  EXPECT_LE(most.load(), 2);
  reader->reset();
  EXPECT_EQ(staging.live(), 0u);

  auto too_small = SnapshotReader::Start(pool.get(), m, &source, {.staging_bytes = kChunk - 1},
                                         [](const ChunkDelivery&) { return Status::Ok(); });
  ASSERT_EQ(too_small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.status().message().find("staging_bytes"), std::string::npos);
}

TEST(ReaderTest, ZeroCopyDeliversFromTheTierNotFromStaging) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {4 * kChunk}, {0}, kChunk, &contents);
  auto tier = DramTier::Create({.capacity_bytes = 8 * kChunk, .slot_bytes = kChunk},
                               std::make_unique<MmapAllocator>(), &source);
  ASSERT_TRUE(tier.ok());
  auto pool = MakePool(2);
  for (bool zero_copy : {true, false}) {
    CountingAllocator staging;
    std::atomic<int> from_staging{0};
    Sink sink(m);
    DeliverFn record = sink.Fn();
    auto reader = SnapshotReader::Start(
        pool.get(), m, tier->get(),
        {.staging_bytes = kChunk, .staging_allocator = &staging, .zero_copy = zero_copy},
        [&](const ChunkDelivery& d) {
          if (staging.InLast(d.data)) ++from_staging;
          return record(d);
        });
    ASSERT_TRUE(reader.ok());
    ASSERT_TRUE((*reader)->Wait().ok());
    EXPECT_EQ(sink.buffers, contents);
    EXPECT_EQ(from_staging.load(), zero_copy ? 0 : 4) << "zero_copy " << zero_copy;
  }
  EXPECT_EQ((*tier)->Stats().misses, 4u);
}

TEST(ReaderTest, BadInputIsRefused) {
  MemoryChunkSource source;
  std::vector<std::string> contents;
  Manifest m = MakeManifest(source, {2 * kChunk}, {0}, kChunk, &contents);
  auto pool = MakePool(1);
  auto ok = [](const ChunkDelivery&) { return Status::Ok(); };
  auto start = [&](const Manifest& man, ReaderOptions o) {
    return SnapshotReader::Start(pool.get(), man, &source, o, ok).status();
  };
  Status s = start(m, {.buffer_order = {1}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("names buffer 1"), std::string::npos) << s.message();
  EXPECT_EQ(start(m, {.buffer_order = {0, 0}}).code(), StatusCode::kInvalidArgument);

  Manifest short_size = m;
  short_size.buffers[0].size = 3 * kChunk;
  s = start(short_size, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("add up to"), std::string::npos) << s.message();

  Manifest empty_chunk = m;
  empty_chunk.buffers[0].chunks[1].size = 0;
  s = start(empty_chunk, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("buffer 0 chunk 1 is empty"), std::string::npos) << s.message();

  EXPECT_EQ(SnapshotReader::Start(nullptr, m, &source, {}, ok).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReaderPool::Create({.io_threads = 0}).status().code(), StatusCode::kInvalidArgument);

  std::vector<ChunkRef> chunks = SnapshotChunks(m);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1], m.buffers[0].chunks[1]);
}

TEST(ReaderTest, EmptySnapshotFinishesAtOnce) {
  MemoryChunkSource source;
  Manifest m;
  m.buffers.emplace_back().size = 0;
  auto pool = MakePool(1);
  auto reader =
      SnapshotReader::Start(pool.get(), m, &source, {}, [](const ChunkDelivery&) { return Status::Ok(); });
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE((*reader)->Done());
  EXPECT_TRUE((*reader)->Wait().ok());
  EXPECT_EQ((*reader)->staging_bytes(), 0u);
}

}  // namespace
}  // namespace phos::store
