// The concurrent restore's loader on simgpu: snapshots captured into a store, restored through a
// DRAM tier into a fresh context while the test reads, requires and launches kernels.
#include "phos/runtime/restore_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "phos/runtime/snapshot_capture.h"
#include "phos/runtime/snapshot_restore.h"
#include "phos/store/dram_tier.h"
#include "phos/store/store.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kChunk = 64 << 10;  // small chunks: buffers span several, tests stay fast
constexpr uint64_t kGranule = 2ull << 20;

uint64_t AlignUp(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

struct Spec {
  uint64_t size = 0;
  uint64_t align = 256;
  std::string label;
  int rank = -1;
  CUdeviceptr address = 0;  // set by Layout
  std::vector<uint8_t> bytes;
};

class RestoreLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    d_ = std::move(*table);
    ASSERT_EQ(d_->cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuCtxCreate(&ctx_, nullptr, 0, dev_), CUDA_SUCCESS);
    ASSERT_TRUE(d_->has_guards());
    dir_ = fs::temp_directory_path() / ("phos-loader-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto store = store::Store::Open({.path = dir_.string(), .chunk_bytes = kChunk, .direct_io = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }
  void TearDown() override {
    tier_.reset();
    if (mapper_) mapper_->UnmapAll();
    store_.reset();
    for (CUcontext c : {fresh_, ctx_}) {
      if (c != nullptr) d_->cuCtxDestroy(c);
    }
    fs::remove_all(dir_);
  }

  // Places specs one after another (each at its alignment) in one VMM region at a free address,
  // filling each with its own bytes.
  void Layout() {
    uint64_t end = 0;
    for (Spec& s : specs_) {
      s.address = AlignUp(end, s.align);
      end = s.address + s.size;
    }
    region_bytes_ = AlignUp(end, kGranule);
    CUdeviceptr base = 0;
    ASSERT_EQ(d_->cuMemAddressReserve(&base, region_bytes_, kGranule, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuMemAddressFree(base, region_bytes_), CUDA_SUCCESS);
    uint32_t seed = 7;
    for (Spec& s : specs_) {
      s.address += base;
      s.bytes.resize(s.size);
      for (auto& b : s.bytes) {
        seed = seed * 1103515245u + 12345u;
        b = static_cast<uint8_t>(seed >> 16);
      }
    }
    region_ = base;
  }

  // Writes the specs into the original context, captures them, unmaps the originals, and maps
  // the addresses again, empty, in a fresh context behind a DRAM tier.
  void CaptureAndMapFresh() {
    ASSERT_EQ(d_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    VmmDeviceMapper original(d_.get(), 0);
    ASSERT_TRUE(original.MapAt(region_, region_bytes_).ok());
    CaptureRequest req{.driver = d_.get(), .context = ctx_, .function = "fn", .device_profile = "ci"};
    for (const Spec& s : specs_) {
      ASSERT_EQ(d_->cuMemcpyHtoD(s.address, s.bytes.data(), s.size), CUDA_SUCCESS);
      req.buffers.push_back(
          {.address = s.address, .size = s.size, .label = s.label, .first_touch_rank = s.rank});
    }
    auto version = CaptureGpuState(req, *store_);
    ASSERT_TRUE(version.ok()) << version.status().ToString();
    auto manifest = store_->LoadManifest("fn", *version);
    ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
    manifest_ = *manifest;
    original.UnmapAll();

    ASSERT_EQ(d_->cuCtxCreate(&fresh_, nullptr, 0, dev_), CUDA_SUCCESS);
    mapper_ = std::make_unique<VmmDeviceMapper>(d_.get(), 0);
    for (const Spec& s : specs_) ASSERT_TRUE(mapper_->MapAt(s.address, s.size).ok()) << s.label;
    auto alloc = store::DriverPinnedAllocator::Create(store::DriverHostMemoryOf(*d_, fresh_));
    ASSERT_TRUE(alloc.ok()) << alloc.status().ToString();
    auto tier = store::DramTier::Create({.capacity_bytes = 256 * kChunk, .slot_bytes = kChunk},
                                        std::move(*alloc), store_.get());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(*tier);
    ASSERT_EQ(d_->cuCtxSetCurrent(fresh_), CUDA_SUCCESS);
  }

  RestoreLoaderOptions Options(uint64_t window = 8ull << 20) {
    return {.driver = d_.get(),
            .context = fresh_,
            .manifest = &manifest_,
            .source = tier_.get(),
            .dram = tier_.get(),
            .window_bytes = window,
            .name = "fn test"};
  }

  void ExpectBytes(const Spec& s) {
    std::vector<uint8_t> back(s.size);
    ASSERT_EQ(d_->cuMemcpyDtoH(back.data(), s.address, s.size), CUDA_SUCCESS) << s.label;
    EXPECT_TRUE(std::equal(back.begin(), back.end(), s.bytes.begin())) << s.label;
  }

  // `count` buffers of `size`, first-touch rank = index (or reversed), each on its own pages.
  void ManyBuffers(int count, uint64_t size, bool reversed_ranks) {
    for (int i = 0; i < count; ++i) {
      specs_.push_back({.size = size,
                        .align = 4096,
                        .label = "b" + std::to_string(i),
                        .rank = reversed_ranks ? count - 1 - i : i});
    }
  }

  // Polls IsResident until all are resident; returns, per buffer, the poll at which it was first
  // seen resident. Each poll checks the buffers in the reverse of the order they should load in,
  // so a buffer that loads between two checks of one poll cannot look early.
  std::vector<int> ReadyPolls(RestoreLoader& loader, bool loads_in_address_order) {
    const int n = static_cast<int>(specs_.size());
    std::vector<int> seen(n, -1);
    int poll = 0;
    for (bool last = false; !last; ++poll) {
      last = loader.all_resident() || poll >= 10'000'000;
      for (int k = 0; k < n; ++k) {
        const int i = loads_in_address_order ? n - 1 - k : k;
        if (seen[i] < 0 && loader.IsResident(i)) seen[i] = poll;
      }
    }
    return seen;
  }

  void IndirectMiss();

  CUmodule LoadFaultsModule() {
#ifdef PHOS_LOADER_TEST_MODULE
    std::ifstream in(PHOS_LOADER_TEST_MODULE, std::ios::binary);
    std::string image{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    CUmodule module = nullptr;
    EXPECT_EQ(d_->cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
    return module;
#else
    return nullptr;
#endif
  }

  std::shared_ptr<driver::DriverTable> d_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUcontext fresh_ = nullptr;
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::DramTier> tier_;
  std::unique_ptr<VmmDeviceMapper> mapper_;
  std::vector<Spec> specs_;
  CUdeviceptr region_ = 0;
  uint64_t region_bytes_ = 0;
  store::Manifest manifest_;
};

TEST_F(RestoreLoaderTest, EveryByteIsBackAfterWait) {
  // Three small buffers packed into one page, a multi-chunk one not a chunk multiple, odd sizes.
  specs_ = {{.size = 100, .label = "tiny-a", .rank = 0},
            {.size = 300, .label = "tiny-b", .rank = 3},
            {.size = 17, .label = "tiny-c", .rank = -1},
            {.size = 3 * kChunk + 999, .label = "weights", .rank = 1},
            {.size = 5000, .label = "bias", .rank = 2},
            {.size = kChunk, .align = 4096, .label = "kv", .rank = -1}};
  Layout();
  CaptureAndMapFresh();
  ASSERT_EQ(specs_[1].address / 4096, specs_[0].address / 4096);  // they do share a page
  auto loader = RestoreLoader::Start(Options());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_TRUE((*loader)->Wait().ok()) << (*loader)->status().ToString();
  EXPECT_TRUE((*loader)->all_resident());
  for (const Spec& s : specs_) ExpectBytes(s);
  const RestoreLoaderStats stats = (*loader)->Stats();
  uint64_t total = 0;
  for (const Spec& s : specs_) total += s.size;
  EXPECT_EQ(stats.bytes, total);
  EXPECT_EQ(stats.buffers, specs_.size());
  EXPECT_EQ(stats.misses, 0u);
  EXPECT_TRUE(stats.all_resident);
  EXPECT_GT(stats.fully_resident_ms, 0.0);
  for (size_t i = 0; i < specs_.size(); ++i) {
    EXPECT_TRUE((*loader)->IsResident(static_cast<int>(i)));
    EXPECT_EQ((*loader)->Find(specs_[i].address + specs_[i].size - 1), static_cast<int>(i));
  }
  EXPECT_EQ((*loader)->Find(specs_[3].address + specs_[3].size), -1);  // the gap after weights
  auto resident = (*loader)->Require(2);
  ASSERT_TRUE(resident.ok());
  EXPECT_EQ(*resident, nullptr);
}

// Background chunks go to the device in pieces (here 4 KiB of 64 KiB chunks, guarded and not):
// every byte arrives, and a unit is unguarded only once all of its pieces landed.
TEST_F(RestoreLoaderTest, BackgroundPiecesSmallerThanAChunkDeliverEveryByte) {
  specs_ = {{.size = 3 * kChunk + 999, .label = "weights", .rank = 0},
            {.size = 5000, .label = "bias", .rank = 1},
            {.size = 2 * kChunk, .align = 4096, .label = "kv", .rank = -1}};
  Layout();
  CaptureAndMapFresh();
  for (bool guard : {true, false}) {
    RestoreLoaderOptions options = Options();
    options.background_piece_bytes = 4096;
    options.guard = guard;
    auto loader = RestoreLoader::Start(options);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    ASSERT_TRUE((*loader)->Wait().ok()) << (*loader)->status().ToString();
    SCOPED_TRACE(guard ? "guarded" : "unguarded");
    EXPECT_EQ((*loader)->Stats().misses, 0u);
    for (const Spec& s : specs_) ExpectBytes(s);
    loader->reset();
    for (const Spec& s : specs_) {  // the next round starts from zeros
      ASSERT_EQ(d_->cuMemsetD8(s.address, 0, s.size), CUDA_SUCCESS);
    }
    // A memset may return before it ran, and the loader's streams do not wait for the NULL stream.
    ASSERT_EQ(d_->cuCtxSynchronize(), CUDA_SUCCESS);
  }
}

TEST_F(RestoreLoaderTest, StreamsInFirstTouchOrder) {
  ManyBuffers(24, 2 * kChunk, /*reversed_ranks=*/true);
  Layout();
  CaptureAndMapFresh();
  auto loader = RestoreLoader::Start(Options(kChunk));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const std::vector<int> seen = ReadyPolls(**loader, /*loads_in_address_order=*/false);
  ASSERT_TRUE((*loader)->Wait().ok());
  // Rank order is address order reversed: the last buffer first.
  for (size_t i = 0; i + 1 < specs_.size(); ++i) EXPECT_GE(seen[i], seen[i + 1]) << i;
  EXPECT_LT(seen.back(), seen.front());
  for (const Spec& s : specs_) ExpectBytes(s);
}

TEST_F(RestoreLoaderTest, NoOrderModeStreamsInAddressOrder) {
  ManyBuffers(24, 2 * kChunk, /*reversed_ranks=*/true);
  Layout();
  CaptureAndMapFresh();
  RestoreLoaderOptions options = Options(kChunk);
  options.first_touch_order = false;
  auto loader = RestoreLoader::Start(options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const std::vector<int> seen = ReadyPolls(**loader, /*loads_in_address_order=*/true);
  ASSERT_TRUE((*loader)->Wait().ok());
  for (size_t i = 0; i + 1 < specs_.size(); ++i) EXPECT_LE(seen[i], seen[i + 1]) << i;
  EXPECT_LT(seen.front(), seen.back());
}

TEST_F(RestoreLoaderTest, RequireOfTheLastBufferMakesItReadyBeforeEarlierOnes) {
  ManyBuffers(16, 8 * kChunk, /*reversed_ranks=*/false);
  Layout();
  CaptureAndMapFresh();
  auto loader = RestoreLoader::Start(Options(kChunk));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto ready = (*loader)->Require(15);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_NE(*ready, nullptr);
  ASSERT_EQ(d_->cuEventSynchronize(*ready), CUDA_SUCCESS);
  EXPECT_FALSE((*loader)->IsResident(14));
  EXPECT_FALSE((*loader)->all_resident());
  ExpectBytes(specs_[15]);  // a Required buffer whose unguard is late is not a miss
  EXPECT_TRUE((*loader)->IsResident(15));
  ASSERT_TRUE((*loader)->Wait().ok());
  const RestoreLoaderStats stats = (*loader)->Stats();
  EXPECT_EQ(stats.required, 1u);
  EXPECT_EQ(stats.misses, 0u);
  for (const Spec& s : specs_) ExpectBytes(s);
}

// Required loads have the link to themselves: while a required buffer loads, the background
// stream issues nothing, so every buffer it streams becomes resident after the required one. (A
// copy engine serves copies as they become ready: chunks issued meanwhile would go between the
// required buffer's and finish first.) The background is held back by an urgent restore until the
// Require has enqueued everything, so only the pause can keep it from going first.
TEST_F(RestoreLoaderTest, BackgroundStreamingPausesWhileARequiredLoadIsPending) {
  ManyBuffers(9, kChunk, /*reversed_ranks=*/false);
  specs_.back().size = 16 * kChunk;
  Layout();
  CaptureAndMapFresh();
  LoadPriority priority;
  priority.BeginUrgent();
  RestoreLoaderOptions options = Options(kChunk);
  options.priority = &priority;
  auto loader = RestoreLoader::Start(options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto ready = (*loader)->Require(8);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_NE(*ready, nullptr);
  priority.EndUrgent();  // the background may stream from here on
  ASSERT_TRUE((*loader)->Wait().ok()) << (*loader)->status().ToString();
  const std::vector<int> order = (*loader)->Stats().ready_order;
  ASSERT_EQ(order.size(), specs_.size());
  EXPECT_EQ(order.front(), 8) << "a background chunk went between the required buffer's";
  for (size_t i = 1; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i) - 1);  // first-touch order
  for (const Spec& s : specs_) ExpectBytes(s);
}

// While a restore a request waits for is loading, a restore nobody waits for (a warm top-up)
// streams nothing in the background, yet loads what a call of its own requires at once; it
// streams the rest when the urgent one is done.
TEST_F(RestoreLoaderTest, ABackgroundRestoreGivesWayToAnUrgentOne) {
  ManyBuffers(4, 2 * kChunk, /*reversed_ranks=*/false);
  Layout();
  CaptureAndMapFresh();
  LoadPriority priority;
  priority.BeginUrgent();  // an urgent restore elsewhere is loading
  RestoreLoaderOptions options = Options(kChunk);
  options.priority = &priority;
  auto loader = RestoreLoader::Start(options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto ready = (*loader)->Require(3);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_NE(*ready, nullptr);
  ASSERT_EQ(d_->cuEventSynchronize(*ready), CUDA_SUCCESS);
  ExpectBytes(specs_[3]);
  // Only the required buffer: the background stream issued nothing meanwhile.
  EXPECT_EQ((*loader)->Stats().bytes, specs_[3].size);
  EXPECT_FALSE((*loader)->all_resident());
  priority.EndUrgent();
  ASSERT_TRUE((*loader)->Wait().ok()) << (*loader)->status().ToString();
  for (const Spec& s : specs_) ExpectBytes(s);
}

TEST_F(RestoreLoaderTest, BadOptionsAndIndicesAreRefused) {
  auto none = RestoreLoader::Start({});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("driver, context, manifest, source"), std::string::npos)
      << none.status().message();

  specs_ = {{.size = 4096, .align = 4096, .label = "only", .rank = 0}};
  Layout();
  CaptureAndMapFresh();
  RestoreLoaderOptions zero = Options();
  zero.window_bytes = 0;
  EXPECT_EQ(RestoreLoader::Start(zero).status().code(), StatusCode::kInvalidArgument);
  for (uint64_t piece : {0ull, 3000ull}) {
    RestoreLoaderOptions bad_piece = Options();
    bad_piece.background_piece_bytes = piece;
    EXPECT_EQ(RestoreLoader::Start(bad_piece).status().code(), StatusCode::kInvalidArgument) << piece;
  }
  auto loader = RestoreLoader::Start(Options());
  ASSERT_TRUE(loader.ok());
  for (int bad : {-1, 1}) {
    auto r = (*loader)->Require(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("no buffer"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE((*loader)->IsResident(1));
  EXPECT_EQ((*loader)->Find(specs_[0].address - 1), -1);
  ASSERT_TRUE((*loader)->Wait().ok());

  store::Manifest empty;
  RestoreLoaderOptions nothing = Options();
  nothing.manifest = &empty;
  auto idle = RestoreLoader::Start(nothing);
  ASSERT_TRUE(idle.ok());
  EXPECT_TRUE((*idle)->all_resident());
  EXPECT_TRUE((*idle)->Wait().ok());
}

TEST_F(RestoreLoaderTest, CorruptChunkFailsTheRestoreNamingIt) {
  specs_ = {{.size = 2 * kChunk, .align = 4096, .label = "weights", .rank = 0},
            {.size = kChunk, .align = 4096, .label = "bias", .rank = 1}};
  Layout();
  CaptureAndMapFresh();
  // Every segment's first byte: the first chunk written is the weights' first chunk.
  for (const auto& entry : fs::directory_iterator(dir_ / "segments")) {
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(0);
    f.write(&c, 1);
  }
  auto loader = RestoreLoader::Start(Options());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const Status waited = (*loader)->Wait();
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.code(), StatusCode::kCorruption) << waited.ToString();
  EXPECT_EQ((*loader)->status(), waited);
  for (const char* part : {"fn v1", "buffer 0 'weights'", "chunk 0"}) {
    EXPECT_NE(waited.message().find(part), std::string::npos) << part << " in " << waited.message();
  }
  auto required = (*loader)->Require(1);
  ASSERT_FALSE(required.ok());
  EXPECT_EQ(required.status(), waited);
  EXPECT_FALSE((*loader)->all_resident());
}

// A session that ends mid-restore destroys its loader while copies are in flight: nothing is left
// guarded, leased or registered, and the memory can be unmapped right after.
TEST_F(RestoreLoaderTest, DestroyingMidStreamIsClean) {
  ManyBuffers(8, 8 * kChunk, /*reversed_ranks=*/false);
  Layout();
  CaptureAndMapFresh();
  int midstream = 0;
  for (int round = 0; round < 20; ++round) {
    auto loader = RestoreLoader::Start(Options(2 * kChunk));
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    if (round % 2 == 1) {
      ASSERT_TRUE((*loader)->Require(7).ok());
    }
    midstream += (*loader)->all_resident() ? 0 : 1;
    loader->reset();
    EXPECT_EQ(tier_->Stats().leased_chunks, 0u) << round;
  }
  EXPECT_GT(midstream, 10);  // most rounds really did end mid-restore
  // Unguarded everywhere: a copy from each buffer succeeds with no loader left to serve a fault.
  std::vector<uint8_t> back(specs_[0].size);
  for (const Spec& s : specs_)
    ASSERT_EQ(d_->cuMemcpyDtoH(back.data(), s.address, s.size), CUDA_SUCCESS) << s.label;
  mapper_->UnmapAll();
  EXPECT_TRUE(mapper_->mappings().empty());
}

// A copy that touches an absent buffer nobody Required is a miss served from the CPU: the copy
// engine it holds may be the one the loader's own copies need.
TEST_F(RestoreLoaderTest, CopyOfAnAbsentBufferIsAMissServedFromTheHost) {
  ManyBuffers(12, 4 * kChunk, /*reversed_ranks=*/false);
  Layout();
  CaptureAndMapFresh();
  // No background stream: the last buffer is still absent when the copy comes, however slow or
  // loaded the host.
  RestoreLoaderOptions options = Options(kChunk);
  options.background = false;
  auto loader = RestoreLoader::Start(options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ExpectBytes(specs_.back());
  const RestoreLoaderStats stats = (*loader)->Stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.last_miss, "memcpy");
  EXPECT_TRUE((*loader)->all_resident());
  ASSERT_TRUE((*loader)->Wait().ok());
  for (const Spec& s : specs_) ExpectBytes(s);
}

TEST_F(RestoreLoaderTest, WithoutGuardsBytesStillArrive) {
  ManyBuffers(4, 3 * kChunk, /*reversed_ranks=*/false);
  Layout();
  CaptureAndMapFresh();
  RestoreLoaderOptions options = Options(kChunk);
  options.guard = false;
  auto loader = RestoreLoader::Start(options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_TRUE((*loader)->Wait().ok());
  for (const Spec& s : specs_) ExpectBytes(s);
  EXPECT_EQ((*loader)->Stats().misses, 0u);
}

#ifdef PHOS_LOADER_TEST_MODULE
TEST_F(RestoreLoaderTest, KernelWaitingOnRequireReadsRestoredData) {
  constexpr int kInts = 3 * kChunk / 4 + 100;
  ManyBuffers(6, 4 * kChunk, /*reversed_ranks=*/false);
  specs_.push_back({.size = kInts * sizeof(int), .align = 4096, .label = "input", .rank = 100});
  Layout();
  std::vector<int> input(kInts);
  for (int i = 0; i < kInts; ++i) input[i] = i * 3;
  std::memcpy(specs_.back().bytes.data(), input.data(), specs_.back().size);
  CaptureAndMapFresh();
  CUmodule module = LoadFaultsModule();
  CUfunction add_one = nullptr;
  ASSERT_EQ(d_->cuModuleGetFunction(&add_one, module, "_Z7add_onePKiPii"), CUDA_SUCCESS);
  CUdeviceptr out = 0;
  ASSERT_EQ(d_->cuMemAlloc(&out, kInts * sizeof(int)), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(d_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

  auto loader = RestoreLoader::Start(Options(kChunk));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto ready = (*loader)->Require(6);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_NE(*ready, nullptr);
  ASSERT_EQ(d_->cuStreamWaitEvent(stream, *ready, 0), CUDA_SUCCESS);
  CUdeviceptr in = specs_.back().address;
  int n = kInts;
  void* params[] = {&in, &out, &n};
  ASSERT_EQ(d_->cuLaunchKernel(add_one, (kInts + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(d_->cuStreamSynchronize(stream), CUDA_SUCCESS);
  std::vector<int> result(kInts);
  ASSERT_EQ(d_->cuMemcpyDtoH(result.data(), out, kInts * sizeof(int)), CUDA_SUCCESS);
  for (int i = 0; i < kInts; ++i) ASSERT_EQ(result[i], i * 3 + 1) << i;
  EXPECT_EQ((*loader)->Stats().misses, 0u);
  ASSERT_TRUE((*loader)->Wait().ok());
  EXPECT_EQ(d_->cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(d_->cuMemFree(out), CUDA_SUCCESS);
  EXPECT_EQ(d_->cuModuleUnload(module), CUDA_SUCCESS);
}

void RestoreLoaderTest::IndirectMiss() {
  constexpr int kInts = 2 * kChunk / 4;
  specs_.push_back({.size = sizeof(CUdeviceptr), .align = 4096, .label = "table", .rank = 0});
  ManyBuffers(12, 4 * kChunk, /*reversed_ranks=*/false);
  for (size_t i = 1; i < specs_.size(); ++i) specs_[i].rank = static_cast<int>(i);
  specs_.push_back({.size = kInts * sizeof(int), .align = 4096, .label = "data", .rank = 100});
  Layout();
  std::vector<int> data(kInts);
  for (int i = 0; i < kInts; ++i) data[i] = i % 1000;
  std::memcpy(specs_.back().bytes.data(), data.data(), specs_.back().size);
  const CUdeviceptr data_address = specs_.back().address;
  std::memcpy(specs_.front().bytes.data(), &data_address, sizeof(data_address));
  CaptureAndMapFresh();
  CUmodule module = LoadFaultsModule();
  CUfunction sum_through = nullptr;
  ASSERT_EQ(d_->cuModuleGetFunction(&sum_through, module, "_Z11sum_throughPKPKiPii"), CUDA_SUCCESS);
  CUdeviceptr out = 0;
  ASSERT_EQ(d_->cuMemAlloc(&out, sizeof(int)), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(d_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

  // Without background streaming the table is loaded because it is Required and the data only
  // through the miss, however slowly this host runs the kernel.
  RestoreLoaderOptions options = Options(kChunk);
  options.background = false;
  auto loader = RestoreLoader::Start(options);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  auto ready = (*loader)->Require(0);
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_NE(*ready, nullptr);
  ASSERT_EQ(d_->cuStreamWaitEvent(stream, *ready, 0), CUDA_SUCCESS);
  CUdeviceptr table = specs_.front().address;
  int n = kInts;
  void* params[] = {&table, &out, &n};
  ASSERT_EQ(d_->cuLaunchKernel(sum_through, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(d_->cuStreamSynchronize(stream), CUDA_SUCCESS);
  int sum = 0;
  ASSERT_EQ(d_->cuMemcpyDtoH(&sum, out, sizeof(sum)), CUDA_SUCCESS);
  long long expected = 0;
  for (int v : data) expected += v;
  EXPECT_EQ(sum, expected);
  const RestoreLoaderStats stats = (*loader)->Stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.last_miss, "_Z11sum_throughPKPKiPii");
  EXPECT_TRUE((*loader)->all_resident());  // the miss made everything resident
  ASSERT_TRUE((*loader)->Wait().ok());
  for (const Spec& s : specs_) ExpectBytes(s);
  EXPECT_EQ(d_->cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(d_->cuMemFree(out), CUDA_SUCCESS);
  EXPECT_EQ(d_->cuModuleUnload(module), CUDA_SUCCESS);
}
// The realistic miss: a kernel reads through a pointer stored in device memory, so only the
// table was Required; the data it reaches is absent, guarded, and made resident by the handler.
TEST_F(RestoreLoaderTest, IndirectAccessToAnAbsentBufferIsCaughtAndCorrect) {
  ASSERT_NE(d_->phosSimMemcpyHtoDAsyncGuarded, nullptr);
  IndirectMiss();
}

// An older simgpu without the guarded copy: units open right before their first chunk (the
// weaker check), and a kernel reaching a unit nothing was enqueued for yet is still caught.
TEST_F(RestoreLoaderTest, WithoutTheGuardedCopyAMissIsStillCaught) {
  d_->phosSimMemcpyHtoDAsyncGuarded = nullptr;
  IndirectMiss();
}

#endif

}  // namespace
}  // namespace phos::runtime
