// GPU-state capture into the store and the stop-the-world restore, on simgpu: a round trip at
// the original addresses, dedup across captures, a corrupt chunk, a taken address, bad requests.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "phos/runtime/snapshot_capture.h"
#include "phos/runtime/snapshot_restore.h"
#include "phos/store/dram_tier.h"
#include "phos/store/reader.h"
#include "phos/store/store.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;

// Small chunks keep the test fast while buffers still span several of them.
constexpr uint32_t kChunk = 64 << 10;

struct Original {
  CUdeviceptr address = 0;
  std::vector<uint8_t> bytes;
  std::string label;
};

class SnapshotCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    d_ = std::move(*table);
    ASSERT_EQ(d_->cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuDeviceGet(&dev_, 0), CUDA_SUCCESS);
    ASSERT_EQ(d_->cuCtxCreate(&ctx_, nullptr, 0, dev_), CUDA_SUCCESS);
    dir_ = fs::temp_directory_path() /
           ("phos-capture-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto store = store::Store::Open({.path = dir_.string(), .chunk_bytes = kChunk, .direct_io = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto pool = store::ReaderPool::Create({});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
  }
  void TearDown() override {
    pool_.reset();
    store_.reset();
    for (CUcontext c : {fresh_, ctx_}) {
      if (c != nullptr) d_->cuCtxDestroy(c);
    }
    fs::remove_all(dir_);
  }

  // Buffers of awkward sizes: more than two chunks, not a chunk multiple, tiny, several granules.
  void MakeBuffers() {
    ASSERT_EQ(d_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    const std::vector<std::pair<size_t, std::string>> shapes = {
        {2 * kChunk + 4321, "weights"}, {100000, "bias"}, {17, "tiny"}, {(3u << 20) + 123, "kv"}};
    uint32_t seed = 1;
    for (const auto& [size, label] : shapes) {
      Original o;
      o.label = label;
      o.bytes.resize(size);
      for (auto& b : o.bytes) {
        seed = seed * 1103515245u + 12345u;
        b = static_cast<uint8_t>(seed >> 16);
      }
      ASSERT_EQ(d_->cuMemAlloc(&o.address, size), CUDA_SUCCESS);
      ASSERT_EQ(d_->cuMemcpyHtoD(o.address, o.bytes.data(), size), CUDA_SUCCESS);
      originals_.push_back(std::move(o));
    }
  }

  CaptureRequest Request() {
    CaptureRequest req{.driver = d_.get(), .context = ctx_, .function = "fn", .device_profile = "ci"};
    int rank = 0;
    for (const auto& o : originals_) {
      req.buffers.push_back({.address = o.address, .size = o.bytes.size(), .label = o.label, .first_touch_rank = rank++});
    }
#ifdef PHOS_CAPTURE_TEST_MODULE
    std::ifstream in(PHOS_CAPTURE_TEST_MODULE, std::ios::binary);
    req.modules.push_back({std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), "simgpu"});
#endif
    store::StreamState stream;
    stream.handle = 7;
    stream.flags = 1;
    req.streams.push_back(stream);
    return req;
  }

  void FreeOriginals() {
    ASSERT_EQ(d_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    for (const auto& o : originals_) ASSERT_EQ(d_->cuMemFree(o.address), CUDA_SUCCESS);
  }

  void MakeFreshContext() { ASSERT_EQ(d_->cuCtxCreate(&fresh_, nullptr, 0, dev_), CUDA_SUCCESS); }

  // Whether [address's granule, +1 granule) can be reserved at exactly that address.
  bool GranuleFree(CUdeviceptr address) {
    const uint64_t g = 2ull << 20;
    const CUdeviceptr base = address / g * g;
    CUdeviceptr got = 0;
    if (d_->cuMemAddressReserve(&got, g, 0, base, 0) != CUDA_SUCCESS) return false;
    d_->cuMemAddressFree(got, g);
    return got == base;
  }

  std::shared_ptr<driver::DriverTable> d_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUcontext fresh_ = nullptr;
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::ReaderPool> pool_;
  std::vector<Original> originals_;
};

TEST_F(SnapshotCaptureTest, RestoresEveryBufferAtItsAddressAndLoadsModules) {
  MakeBuffers();
  auto version = CaptureGpuState(Request(), *store_);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, 1u);
  auto manifest = store_->LoadManifest("fn", 1);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  ASSERT_EQ(manifest->buffers.size(), 4u);
  EXPECT_EQ(manifest->buffers[0].chunks.size(), 3u);
  EXPECT_EQ(manifest->buffers[2].label, "tiny");
  ASSERT_EQ(manifest->streams.size(), 1u);
  EXPECT_EQ(manifest->streams[0].handle, 7u);

  FreeOriginals();
  MakeFreshContext();
  VmmDeviceMapper mapper(d_.get(), 0);
  RestoreRequest req{.driver = d_.get(), .context = fresh_, .mapper = &mapper, .pool = pool_.get()};
  auto report = RestoreStopTheWorld(req, *manifest, *store_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  uint64_t total = 0;
  for (const auto& o : originals_) total += o.bytes.size();
  EXPECT_EQ(report->bytes, total);
  EXPECT_EQ(report->buffers, 4u);

  ASSERT_EQ(d_->cuCtxSetCurrent(fresh_), CUDA_SUCCESS);
  for (const auto& o : originals_) {
    std::vector<uint8_t> back(o.bytes.size());
    ASSERT_EQ(d_->cuMemcpyDtoH(back.data(), o.address, back.size()), CUDA_SUCCESS) << o.label;
    EXPECT_EQ(std::memcmp(back.data(), o.bytes.data(), back.size()), 0) << o.label;
  }
#ifdef PHOS_CAPTURE_TEST_MODULE
  ASSERT_EQ(report->modules.size(), 1u);
  CUfunction fn = nullptr;
  EXPECT_EQ(d_->cuModuleGetFunction(&fn, report->modules[0], "_Z12mixed_paramscdiPd4Vec39Aligned16"), CUDA_SUCCESS);
  EXPECT_GT(report->module_bytes, 0u);
  for (CUmodule m : report->modules) d_->cuModuleUnload(m);
#endif
  EXPECT_FALSE(GranuleFree(originals_[0].address));
  mapper.UnmapAll();
  EXPECT_TRUE(GranuleFree(originals_[0].address));
}

// The production shape: chunks through the DRAM tier (delivered from its pinned slots), the
// reader's staging from cuMemHostAlloc; then the restored instance is captured again, which
// reads the VMM-mapped buffers and stores nothing new.
TEST_F(SnapshotCaptureTest, RestoresThroughTheDramTierAndRecapturesIdentically) {
  MakeBuffers();
  ASSERT_TRUE(CaptureGpuState(Request(), *store_).ok());
  auto manifest = store_->LoadManifest("fn", 1);
  ASSERT_TRUE(manifest.ok());
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  FreeOriginals();
  MakeFreshContext();

  auto tier_alloc = store::DriverPinnedAllocator::Create(store::DriverHostMemoryOf(*d_, fresh_));
  ASSERT_TRUE(tier_alloc.ok()) << tier_alloc.status().ToString();
  auto tier = store::DramTier::Create({.capacity_bytes = 16 * kChunk, .slot_bytes = kChunk}, std::move(*tier_alloc),
                                      store_.get());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  auto staging = store::DriverPinnedAllocator::Create(store::DriverHostMemoryOf(*d_, fresh_));
  ASSERT_TRUE(staging.ok());
  VmmDeviceMapper mapper(d_.get(), 0);
  RestoreRequest req{.driver = d_.get(),
                     .context = fresh_,
                     .mapper = &mapper,
                     .pool = pool_.get(),
                     .staging_allocator = staging->get(),
                     .staging_bytes = 4 * kChunk};
  auto report = RestoreStopTheWorld(req, *manifest, **tier);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT((*tier)->Stats().misses, 0u);
  for (CUmodule m : report->modules) d_->cuModuleUnload(m);

  CaptureRequest again = Request();
  again.context = fresh_;
  auto version = CaptureGpuState(again, *store_);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, 2u);
  auto after = store_->Stats();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->unique_bytes, stats->unique_bytes);
  auto second = store_->LoadManifest("fn", 2);
  ASSERT_TRUE(second.ok());
  for (size_t i = 0; i < manifest->buffers.size(); ++i) {
    EXPECT_EQ(second->buffers[i], manifest->buffers[i]) << i;
  }
  mapper.UnmapAll();
}

TEST_F(SnapshotCaptureTest, CapturingTwiceStoresSharedChunksOnce) {
  MakeBuffers();
  ASSERT_TRUE(CaptureGpuState(Request(), *store_).ok());
  auto once = store_->Stats();
  ASSERT_TRUE(once.ok());
  auto again = CaptureGpuState(Request(), *store_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, 2u);
  auto twice = store_->Stats();
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->snapshots, 2u);
  EXPECT_EQ(twice->unique_bytes, once->unique_bytes);
  EXPECT_EQ(twice->live_chunks, once->live_chunks);
  EXPECT_EQ(twice->logical_bytes, 2 * once->logical_bytes);
}

TEST_F(SnapshotCaptureTest, CorruptChunkFailsNamingItAndLeavesNothingMapped) {
  MakeBuffers();
  ASSERT_TRUE(CaptureGpuState(Request(), *store_).ok());
  auto manifest = store_->LoadManifest("fn", 1);
  ASSERT_TRUE(manifest.ok());
  // Every segment's first byte: the first chunk written is the weights' first chunk.
  int flipped = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "segments")) {
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(0);
    f.write(&c, 1);
    ++flipped;
  }
  ASSERT_GT(flipped, 0);
  FreeOriginals();
  MakeFreshContext();
  VmmDeviceMapper mapper(d_.get(), 0);
  RestoreRequest req{.driver = d_.get(), .context = fresh_, .mapper = &mapper, .pool = pool_.get()};
  auto report = RestoreStopTheWorld(req, *manifest, *store_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kCorruption) << report.status().ToString();
  const std::string msg = report.status().message();
  EXPECT_NE(msg.find("fn v1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chunk"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weights"), std::string::npos) << msg;
  EXPECT_TRUE(mapper.mappings().empty());
  for (const auto& o : originals_) EXPECT_TRUE(GranuleFree(o.address)) << o.label;
}

TEST_F(SnapshotCaptureTest, TakenAddressIsAClearErrorAndNothingStaysMapped) {
  MakeBuffers();
  ASSERT_TRUE(CaptureGpuState(Request(), *store_).ok());
  auto manifest = store_->LoadManifest("fn", 1);
  ASSERT_TRUE(manifest.ok());
  MakeFreshContext();  // the originals still hold their addresses
  VmmDeviceMapper mapper(d_.get(), 0);
  RestoreRequest req{.driver = d_.get(), .context = fresh_, .mapper = &mapper, .pool = pool_.get()};
  auto report = RestoreStopTheWorld(req, *manifest, *store_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kAlreadyExists) << report.status().ToString();
  EXPECT_NE(report.status().message().find("buffer 0 'weights'"), std::string::npos) << report.status().message();
  EXPECT_NE(report.status().message().find("not free"), std::string::npos) << report.status().message();
  EXPECT_TRUE(mapper.mappings().empty());
}

// A module that does not load, or whose image does not match its hash, fails the restore after
// every buffer was mapped and copied: all of it is undone.
TEST_F(SnapshotCaptureTest, ModuleFailuresUndoTheWholeRestore) {
  MakeBuffers();
  CaptureRequest req = Request();
  req.modules = {{"not a module image", "simgpu"}};
  ASSERT_TRUE(CaptureGpuState(req, *store_).ok());
  auto manifest = store_->LoadManifest("fn", 1);
  ASSERT_TRUE(manifest.ok());
  FreeOriginals();
  MakeFreshContext();
  VmmDeviceMapper mapper(d_.get(), 0);
  RestoreRequest restore{.driver = d_.get(), .context = fresh_, .mapper = &mapper, .pool = pool_.get()};

  auto report = RestoreStopTheWorld(restore, *manifest, *store_);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("module 0 (simgpu): cuModuleLoadData"), std::string::npos)
      << report.status().message();
  EXPECT_TRUE(mapper.mappings().empty());
  for (const auto& o : originals_) EXPECT_TRUE(GranuleFree(o.address)) << o.label;

  store::Manifest tampered = *manifest;
  tampered.modules[0].content_hash = store::ChunkId{0x0101010101010101ull, 0x0101010101010101ull};
  report = RestoreStopTheWorld(restore, tampered, *store_);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kCorruption);
  EXPECT_NE(report.status().message().find("content hash"), std::string::npos) << report.status().message();
  for (const auto& o : originals_) EXPECT_TRUE(GranuleFree(o.address)) << o.label;
}

TEST_F(SnapshotCaptureTest, BadRequestsAreRefusedWithAReason) {
  MakeBuffers();
  CaptureRequest zero = Request();
  zero.buffers[1].size = 0;
  auto r = CaptureGpuState(zero, *store_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'bias'"), std::string::npos) << r.status().message();

  CaptureRequest overlap = Request();
  overlap.buffers[1].address = overlap.buffers[0].address + 8;
  r = CaptureGpuState(overlap, *store_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overlaps"), std::string::npos) << r.status().message();

  CaptureRequest kind = Request();
  kind.modules.push_back({"bytes", "ptx"});
  r = CaptureGpuState(kind, *store_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'ptx'"), std::string::npos) << r.status().message();

  CaptureRequest bad_address = Request();
  bad_address.buffers.push_back({.address = 0x10, .size = 4096, .label = "nowhere"});
  r = CaptureGpuState(bad_address, *store_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'nowhere'"), std::string::npos) << r.status().message();

  CaptureRequest past_end = Request();
  past_end.buffers[2].size = 4096;  // the 17-byte allocation
  r = CaptureGpuState(past_end, *store_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("runs past the end"), std::string::npos) << r.status().message();
  auto versions = store_->ListVersions("fn");
  EXPECT_TRUE(!versions.ok() || versions->empty());

  auto restore = RestoreStopTheWorld({}, store::Manifest{}, *store_);
  EXPECT_EQ(restore.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phos::runtime
