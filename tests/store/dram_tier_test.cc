#include "phos/store/dram_tier.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <thread>

#include "phos/driver/driver_table.h"
#include "tier_test_util.h"

namespace phos::store {
namespace {

using testing::MemoryChunkSource;
using testing::RandomBytes;

constexpr uint32_t kSlot = 4096;

std::unique_ptr<DramTier> MakeTier(ChunkSource* backing, size_t slots) {
  auto tier = DramTier::Create({.capacity_bytes = slots * kSlot, .slot_bytes = kSlot},
                               std::make_unique<MmapAllocator>(), backing);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(*tier) : nullptr;
}

std::string Read(DramTier& tier, const ChunkRef& ref) {
  std::string out(ref.size, '\0');
  Status s = tier.ReadChunk(ref, out.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(DramTierTest, BadOptionsAreRefused) {
  MemoryChunkSource source;
  auto small = DramTier::Create({.capacity_bytes = 100, .slot_bytes = kSlot},
                                std::make_unique<MmapAllocator>(), &source);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("smaller than one slot"), std::string::npos)
      << small.status().message();
  auto no_backing = DramTier::Create({.capacity_bytes = kSlot, .slot_bytes = kSlot},
                                     std::make_unique<MmapAllocator>(), nullptr);
  EXPECT_EQ(no_backing.status().code(), StatusCode::kInvalidArgument);
  auto zero_slot = DramTier::Create({.capacity_bytes = kSlot, .slot_bytes = 0},
                                    std::make_unique<MmapAllocator>(), &source);
  EXPECT_EQ(zero_slot.status().code(), StatusCode::kInvalidArgument);
}

TEST(DramTierTest, ReadThroughCountsHitsAndMisses) {
  MemoryChunkSource source;
  std::string a = RandomBytes(kSlot, 1), b = RandomBytes(1000, 2);
  ChunkRef ra = source.Put(a), rb = source.Put(b);
  auto tier = MakeTier(&source, 4);
  EXPECT_EQ(Read(*tier, ra), a);
  EXPECT_EQ(Read(*tier, ra), a);
  EXPECT_EQ(Read(*tier, rb), b);
  EXPECT_EQ(Read(*tier, ra), a);
  DramTierStats st = tier->Stats();
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.resident_chunks, 2u);
  EXPECT_EQ(st.capacity_slots, 4u);
  EXPECT_EQ(source.reads(), 2);
  EXPECT_EQ(tier->capacity_bytes(), 4u * kSlot);
}

TEST(DramTierTest, EvictsLeastRecentlyUsedAndKeepsWithinCapacity) {
  MemoryChunkSource source;
  std::vector<ChunkRef> refs;
  for (uint32_t i = 0; i < 5; ++i) refs.push_back(source.Put(RandomBytes(kSlot, 10 + i)));
  auto tier = MakeTier(&source, 3);
  Read(*tier, refs[0]);
  Read(*tier, refs[1]);
  Read(*tier, refs[2]);
  Read(*tier, refs[0]);  // 0 is now the most recently used; 1 the least
  Read(*tier, refs[3]);
  EXPECT_FALSE(tier->IsResident(refs[1].id));
  EXPECT_TRUE(tier->IsResident(refs[0].id));
  EXPECT_TRUE(tier->IsResident(refs[2].id));
  EXPECT_TRUE(tier->IsResident(refs[3].id));
  Read(*tier, refs[4]);  // evicts 2
  EXPECT_FALSE(tier->IsResident(refs[2].id));
  EXPECT_TRUE(tier->IsResident(refs[0].id));
  DramTierStats st = tier->Stats();
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_EQ(st.resident_chunks, 3u);
}

TEST(DramTierTest, PinnedChunksAreNeverEvictedAndSharedOnesStayUntilBothUnpin) {
  MemoryChunkSource source;
  std::vector<ChunkRef> r;
  for (uint32_t i = 0; i < 7; ++i) r.push_back(source.Put(RandomBytes(kSlot, 20 + i)));
  auto tier = MakeTier(&source, 3);
  ASSERT_TRUE(tier->Pin("s1", {r[0], r[1]}).ok());
  ASSERT_TRUE(tier->Pin("s2", {r[1], r[2], r[1]}).ok());  // r1 shared; duplicates count once
  EXPECT_EQ(tier->Stats().pinned_chunks, 3u);
  EXPECT_EQ(tier->Stats().pinned_bytes, 3u * kSlot);
  EXPECT_EQ(tier->Pin("s1", {r[3]}).code(), StatusCode::kAlreadyExists);

  // All three slots pinned: a read still works, around the tier.
  EXPECT_EQ(Read(*tier, r[3]), RandomBytes(kSlot, 23));
  EXPECT_EQ(tier->Stats().bypasses, 1u);
  EXPECT_FALSE(tier->IsResident(r[3].id));

  ASSERT_TRUE(tier->Unpin("s1").ok());
  Read(*tier, r[4]);  // evicts r0, the only unpinned chunk
  Read(*tier, r[5]);  // evicts r4
  EXPECT_FALSE(tier->IsResident(r[0].id));
  EXPECT_TRUE(tier->IsResident(r[1].id)) << "still pinned by s2";
  EXPECT_TRUE(tier->IsResident(r[2].id));

  ASSERT_TRUE(tier->Unpin("s2").ok());
  Read(*tier, r[6]);
  Read(*tier, r[0]);
  Read(*tier, r[3]);
  EXPECT_FALSE(tier->IsResident(r[1].id));
  EXPECT_FALSE(tier->IsResident(r[2].id));
  EXPECT_EQ(tier->Unpin("s2").code(), StatusCode::kNotFound);
}

TEST(DramTierTest, PinThatDoesNotFitLeavesNothingPinned) {
  MemoryChunkSource source;
  std::vector<ChunkRef> r;
  for (uint32_t i = 0; i < 4; ++i) r.push_back(source.Put(RandomBytes(kSlot, 30 + i)));
  auto tier = MakeTier(&source, 2);
  ASSERT_TRUE(tier->Pin("small", {r[0]}).ok());
  Status s = tier->Pin("big", {r[1], r[2], r[3]});
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.ToString();
  EXPECT_NE(s.message().find("pin 'big'"), std::string::npos) << s.message();
  EXPECT_EQ(tier->Stats().pinned_chunks, 1u);
  EXPECT_EQ(tier->Unpin("big").code(), StatusCode::kNotFound);
  // The slot the failed pin used is evictable again.
  Read(*tier, r[3]);
  EXPECT_TRUE(tier->IsResident(r[3].id));
}

// Chunks smaller than a page share one, each in a slot of the smallest power-of-two class that
// holds it: a tier of two 64 KiB pages pins 32 chunks of 4000 bytes, where one chunk per page
// would hold 2. A page-sized chunk then finds no room until they are unpinned, and takes back a
// page of the small class (evicting its chunks); other sizes get pages of their own class.
TEST(DramTierTest, SmallChunksSharePagesAndAPageGoesBackToAnotherClassWhenIdle) {
  constexpr uint32_t kPage = 64 << 10;
  MemoryChunkSource source;
  std::vector<ChunkRef> small;
  for (uint32_t i = 0; i < 32; ++i) small.push_back(source.Put(RandomBytes(4000, 100 + i)));
  const ChunkRef whole = source.Put(RandomBytes(kPage, 200));
  const ChunkRef middle = source.Put(RandomBytes(20000, 201));  // a 32 KiB slot
  auto created = DramTier::Create({.capacity_bytes = 2 * kPage, .slot_bytes = kPage}, std::make_unique<MmapAllocator>(),
                                  &source);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  DramTier& tier = **created;
  ASSERT_TRUE(tier.Pin("small", small).ok());
  EXPECT_EQ(tier.Stats().pinned_chunks, 32u);
  EXPECT_EQ(tier.Stats().pinned_bytes, 32u * 4000);
  for (uint32_t i = 0; i < 32; ++i) EXPECT_EQ(Read(tier, small[i]), RandomBytes(4000, 100 + i)) << i;

  EXPECT_EQ(Read(tier, whole), RandomBytes(kPage, 200));  // no page is idle: read around the tier
  EXPECT_EQ(tier.Stats().bypasses, 1u);
  EXPECT_FALSE(tier.IsResident(whole.id));

  ASSERT_TRUE(tier.Unpin("small").ok());
  EXPECT_EQ(Read(tier, whole), RandomBytes(kPage, 200));
  EXPECT_TRUE(tier.IsResident(whole.id));
  EXPECT_EQ(tier.Stats().evictions, 16u) << "one page of small chunks";
  int resident_small = 0;
  for (const ChunkRef& r : small) resident_small += tier.IsResident(r.id) ? 1 : 0;
  EXPECT_EQ(resident_small, 16);

  EXPECT_EQ(Read(tier, middle), RandomBytes(20000, 201));  // takes back the other small page
  EXPECT_TRUE(tier.IsResident(middle.id));
  EXPECT_TRUE(tier.IsResident(whole.id));
  EXPECT_EQ(tier.Stats().evictions, 32u);
  EXPECT_EQ(tier.Stats().resident_chunks, 2u);
  // Bytes read back from any class are the chunk's.
  EXPECT_EQ(Read(tier, small[0]), RandomBytes(4000, 100));  // a page again for the 4 KiB class
  EXPECT_EQ(Read(tier, middle), RandomBytes(20000, 201));
}

TEST(DramTierTest, CorruptBackingChunkFailsNamedAndIsNotCached) {
  // A backing source that does not check: the tier's own verification must catch it.
  MemoryChunkSource source(/*verify=*/false);
  std::string bytes = RandomBytes(kSlot, 40);
  ChunkRef ref = source.Put(bytes);
  source.Corrupt(ref.id);
  auto tier = MakeTier(&source, 2);
  std::string out(kSlot, '\0');
  Status s = tier->ReadChunk(ref, out.data());
  ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(ref.id.ToHex()), std::string::npos) << s.message();
  EXPECT_FALSE(tier->IsResident(ref.id));
  EXPECT_EQ(tier->Stats().load_failures, 1u);
  EXPECT_EQ(tier->Lease(ref).status().code(), StatusCode::kCorruption);

  source.Put(bytes);  // repaired
  EXPECT_EQ(Read(*tier, ref), bytes);
  EXPECT_TRUE(tier->IsResident(ref.id));
}

TEST(DramTierTest, MissingChunkErrorNamesIt) {
  MemoryChunkSource source;
  std::string bytes = RandomBytes(100, 41);
  ChunkRef ref{ChunkId::Of(bytes.data(), bytes.size()), 100};
  auto tier = MakeTier(&source, 1);
  std::string out(100, '\0');
  Status s = tier->ReadChunk(ref, out.data());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(ref.id.ToHex()), std::string::npos);
}

TEST(DramTierTest, LeaseBlocksEvictionUntilReleased) {
  MemoryChunkSource source;
  std::string a = RandomBytes(kSlot, 50), b = RandomBytes(kSlot, 51);
  ChunkRef ra = source.Put(a), rb = source.Put(b);
  auto tier = MakeTier(&source, 1);
  Result<ChunkLease> lease = tier->Lease(ra);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(std::string(static_cast<const char*>(lease->data()), lease->size()), a);
  EXPECT_EQ(tier->Stats().leased_chunks, 1u);
  EXPECT_EQ(tier->Lease(rb).status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(Read(*tier, rb), b);  // around the tier
  EXPECT_TRUE(tier->IsResident(ra.id));

  ChunkLease moved = std::move(*lease);
  EXPECT_FALSE(static_cast<bool>(*lease));
  moved.Release();
  EXPECT_EQ(tier->Stats().leased_chunks, 0u);
  EXPECT_EQ(Read(*tier, rb), b);
  EXPECT_FALSE(tier->IsResident(ra.id));
  EXPECT_TRUE(tier->IsResident(rb.id));

  std::string big = RandomBytes(kSlot + 1, 52);
  ChunkRef rbig = source.Put(big);
  EXPECT_EQ(tier->Lease(rbig).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(*tier, rbig), big);
}

TEST(DramTierTest, ConcurrentReadersSeeCorrectBytes) {
  MemoryChunkSource source;
  std::vector<ChunkRef> refs;
  std::vector<std::string> bytes;
  for (uint32_t i = 0; i < 24; ++i) {
    bytes.push_back(RandomBytes(kSlot, 60 + i));
    refs.push_back(source.Put(bytes.back()));
  }
  auto tier = MakeTier(&source, 8);
  constexpr int kThreads = 4, kReads = 400;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::string out(kSlot, '\0');
      for (int i = 0; i < kReads; ++i) {
        size_t k = rng() % refs.size();
        if (!tier->ReadChunk(refs[k], out.data()).ok() || out != bytes[k]) ++wrong;
        if (i % 7 == 0) {
          Result<ChunkLease> lease = tier->Lease(refs[k]);
          if (lease.ok() && std::memcmp(lease->data(), bytes[k].data(), kSlot) != 0) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  DramTierStats st = tier->Stats();
  EXPECT_LE(st.resident_chunks, 8u);
  EXPECT_EQ(st.leased_chunks, 0u);
  EXPECT_GT(st.evictions, 0u);
}

// Readers of chunks of many sizes share a tier too small for them: pages change class under
// them while others read, and every read and lease gives the chunk's bytes.
TEST(DramTierTest, ConcurrentReadersOfEverySizeSeeCorrectBytes) {
  constexpr uint32_t kPage = 64 << 10;
  MemoryChunkSource source;
  std::vector<ChunkRef> refs;
  std::vector<std::string> bytes;
  for (uint32_t i = 0; i < 40; ++i) {
    const uint32_t size = std::max<uint32_t>(1, kPage >> (i % 6)) - (i % 3) * 100;
    bytes.push_back(RandomBytes(size, 300 + i));
    refs.push_back(source.Put(bytes.back()));
  }
  auto created = DramTier::Create({.capacity_bytes = 4 * kPage, .slot_bytes = kPage}, std::make_unique<MmapAllocator>(),
                                  &source);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  DramTier& tier = **created;
  constexpr int kThreads = 4, kReads = 600;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < kReads; ++i) {
        const size_t k = rng() % refs.size();
        std::string out(refs[k].size, '\0');
        if (!tier.ReadChunk(refs[k], out.data()).ok() || out != bytes[k]) ++wrong;
        if (i % 5 == 0) {
          Result<ChunkLease> lease = tier.Lease(refs[k]);
          if (lease.ok() && std::memcmp(lease->data(), bytes[k].data(), refs[k].size) != 0) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  DramTierStats st = tier.Stats();
  EXPECT_EQ(st.leased_chunks, 0u);
  EXPECT_GT(st.evictions, 0u);
  // Every resident chunk is still readable from the tier as itself.
  for (size_t k = 0; k < refs.size(); ++k) {
    if (tier.IsResident(refs[k].id)) {
      EXPECT_EQ(Read(tier, refs[k]), bytes[k]) << k;
    }
  }
}

TEST(DramTierTest, DriverPinnedArenaComesFromSimgpuPinnedMemory) {
  auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim, .require_cublas = false});
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  driver::DriverTable& t = **table;
  ASSERT_EQ(t.cuInit(0), CUDA_SUCCESS);
  CUdevice dev = 0;
  ASSERT_EQ(t.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(t.cuCtxCreate(&ctx, nullptr, 0, dev), CUDA_SUCCESS);

  EXPECT_EQ(DriverPinnedAllocator::Create(DriverHostMemoryOf(t, nullptr)).status().code(),
            StatusCode::kInvalidArgument);
  auto allocator = DriverPinnedAllocator::Create(DriverHostMemoryOf(t, ctx));
  ASSERT_TRUE(allocator.ok()) << allocator.status().ToString();
  EXPECT_EQ((*allocator)->Allocate(0).status().code(), StatusCode::kInvalidArgument);

  MemoryChunkSource source;
  std::string bytes = RandomBytes(kSlot, 70);
  ChunkRef ref = source.Put(bytes);
  auto tier =
      DramTier::Create({.capacity_bytes = 4 * kSlot, .slot_bytes = kSlot}, std::move(*allocator), &source);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_STREQ((*tier)->allocator_name(), "cuMemHostAlloc");
  Result<ChunkLease> lease = (*tier)->Lease(ref);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(std::memcmp(lease->data(), bytes.data(), kSlot), 0);

  // The driver knows the slot as pinned host memory (simgpu then copies it at the pinned rate).
  void* lib = dlopen(t.driver_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto get_attribute =
      reinterpret_cast<decltype(&cuPointerGetAttribute)>(dlsym(lib, "cuPointerGetAttribute"));
  ASSERT_NE(get_attribute, nullptr);
  unsigned type = 0;
  ASSERT_EQ(
      get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(lease->data())),
      CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  lease->Release();
  tier->reset();
  EXPECT_EQ(t.cuCtxDestroy(ctx), CUDA_SUCCESS);
}

}  // namespace
}  // namespace phos::store
