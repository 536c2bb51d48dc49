// Captures of a session that runs on (docs/design.md D10): a soft copy-on-write capture holds every
// buffer as it was at its point, whatever the session writes or frees once its calls run again; a
// soft recopy holds every buffer as it was at its final stop, whatever the session wrote, freed or
// made while its first copies were taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "../testing/wait_until.h"
#include "api_server_fixture.h"
#include "phos/driver/context_scope.h"
#include "phos/store/store.h"
#include "ring_client.h"

namespace phos::runtime {
namespace {

class ApiServerCaptureTest : public ApiServerSessionTest {
 protected:
  void SetUp() override {
    ApiServerSessionTest::SetUp();
    dir_ = "/tmp/phos-api-capture-store-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    auto store = store::Store::Open({.path = dir_});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    Result<int> slot = server_->ClaimVaSlot();
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    slot_ = *slot;
  }
  // A session allocating in the instance range, as a deploy's does.
  std::string DeployToken() {
    SessionPlan deploy;
    deploy.va_slot = slot_;
    deploy.function = "fn";
    return server_->IssueToken(std::move(deploy));
  }
  void TearDown() override {
    ApiServerSessionTest::TearDown();
    token_.clear();
    store_.reset();
    if (slot_ >= 0) server_->ReleaseVaSlot(slot_);
    std::filesystem::remove_all(dir_);
  }

  uint64_t Alloc(uint64_t bytes) {
    ipc::SizeArgs a{bytes};
    uint64_t ptr = 0;
    EXPECT_EQ(Call(ipc::Op::kMemAlloc, &a, sizeof(a), &ptr), CUDA_SUCCESS);
    return ptr;
  }
  // Fills [ptr, ptr + bytes) with `value` and waits for it.
  void Fill(uint64_t ptr, uint64_t bytes, uint8_t value) {
    ipc::MemsetArgs m{.dst = ptr, .bytes = bytes, .stream = 0, .value = value, .element_bytes = 0};
    Queue(ipc::Op::kMemset, &m, sizeof(m));
    EXPECT_EQ(Call(ipc::Op::kDeviceSynchronize, nullptr, 0), CUDA_SUCCESS);
  }
  // The first `bytes` of the live buffer at `ptr`.
  std::vector<uint8_t> Read(uint64_t ptr, uint64_t bytes) {
    ipc::CopyArgs read{.dst = 0, .src = ptr, .bytes = bytes, .stream = 0};
    EXPECT_EQ(Call(ipc::Op::kMemcpyDtoH, &read, sizeof(read)), CUDA_SUCCESS);
    const auto* p = ring_->reply_payload();
    return std::vector<uint8_t>(p, p + bytes);
  }
  // Each buffer of snapshot `version`, by device address: whether every byte is `value`.
  std::map<uint64_t, int> Fills(uint64_t version) {
    std::map<uint64_t, int> fills;
    Result<store::Manifest> manifest = store_->LoadManifest("fn", version);
    EXPECT_TRUE(manifest.ok()) << manifest.status().ToString();
    if (!manifest.ok()) return fills;
    for (size_t i = 0; i < manifest->buffers.size(); ++i) {
      const store::Buffer& b = manifest->buffers[i];
      std::vector<uint8_t> bytes(b.size);
      EXPECT_TRUE(store_->ReadBuffer(*manifest, static_cast<int>(i), bytes.data()).ok());
      const bool uniform = std::all_of(bytes.begin(), bytes.end(), [&](uint8_t v) { return v == bytes[0]; });
      fills[b.device_address] = uniform ? bytes[0] : -1;
    }
    return fills;
  }

  // The bytes of the buffer at `address` in snapshot `version`; empty when it holds none there.
  std::vector<uint8_t> Stored(uint64_t version, uint64_t address) {
    Result<store::Manifest> manifest = store_->LoadManifest("fn", version);
    EXPECT_TRUE(manifest.ok()) << manifest.status().ToString();
    for (size_t i = 0; manifest.ok() && i < manifest->buffers.size(); ++i) {
      if (manifest->buffers[i].device_address != address) continue;
      std::vector<uint8_t> bytes(manifest->buffers[i].size);
      EXPECT_TRUE(store_->ReadBuffer(*manifest, static_cast<int>(i), bytes.data()).ok());
      return bytes;
    }
    return {};
  }

  // A session of `token` that has the faults module's store_through_table, `target_` (8 KiB of
  // 0x11) and `pointer_table_` holding its address: the kernel writes `target_` through a pointer
  // its parameters do not show.
  void ConnectPointerTableWriter(const std::string& token) {
    ASSERT_TRUE(client_.Connect(path_, token));
    ASSERT_TRUE(client_.SendModule(1, testing::ReadFileBytes(PHOS_FAULTS_TEST_MODULE)));
    store_through_table_ = client_.Function("_Z19store_through_tablePKPii");
    ASSERT_NE(store_through_table_, 0u);
    target_ = client_.Alloc(8192);
    pointer_table_ = client_.Alloc(4096);
    const std::vector<uint8_t> fill(8192, 0x11);
    ASSERT_EQ(client_.Upload(target_, fill.data(), fill.size()), CUDA_SUCCESS);
    ASSERT_EQ(client_.Upload(pointer_table_, &target_, sizeof(target_)), CUDA_SUCCESS);
  }
  // Writes `value` at target_ through the table, and waits for it.
  void WriteThroughTable(int32_t value) {
    uint8_t params[12] = {};
    std::memcpy(params, &pointer_table_, sizeof(pointer_table_));
    std::memcpy(params + 8, &value, sizeof(value));
    ipc::LaunchArgs launch{store_through_table_, 0, {1, 1, 1}, {1, 1, 1}, 0, sizeof(params)};
    EXPECT_EQ(client_.Call(ipc::Op::kLaunch, launch, params, sizeof(params)), CUDA_SUCCESS);
    EXPECT_EQ(client_.Call(ipc::Op::kDeviceSynchronize, nullptr, 0), CUDA_SUCCESS);
  }

  std::string dir_;
  std::unique_ptr<store::Store> store_;
  int slot_ = -1;
  testing::RingClient client_;
  uint64_t store_through_table_ = 0;
  uint64_t target_ = 0;
  uint64_t pointer_table_ = 0;
};

TEST_F(ApiServerCaptureTest, ASoftCaptureHoldsEveryBufferAsItWasAtItsPointWhileTheSessionWritesOn) {
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  // 9 MiB: three pieces of the capture's copies.
  const uint64_t big = Alloc(9u << 20);
  const uint64_t small = Alloc(4096);
  const uint64_t freed = Alloc(65536);
  const uint64_t untouched = Alloc(65536);
  Fill(big, 9u << 20, 0x11);
  Fill(small, 4096, 0x22);
  Fill(freed, 65536, 0x33);
  Fill(untouched, 65536, 0x44);

  bool at_point = false;
  CaptureStats stats;
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftCow;
  options.stats = &stats;
  // Called before the capture copies a byte: the session's calls run on from here, and what they
  // write (or free) must be copied first, as it was at the point.
  options.at_point = [&] {
    at_point = true;
    // One capture of a session at a time: EndSession waits for it, which a second would hide.
    CaptureOptions again;
    again.mode = CheckpointMode::kSoftCow;
    EXPECT_EQ(server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), again).status().code(),
              StatusCode::kFailedPrecondition);
    Fill(big, 9u << 20, 0x55);
    Fill(small, 16, 0x66);  // part of a buffer: the whole buffer is copied first
    ipc::PointerArgs free_args{freed};
    EXPECT_EQ(Call(ipc::Op::kMemFree, &free_args, sizeof(free_args)), CUDA_SUCCESS);
  };
  Result<uint64_t> soft = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(soft.ok()) << soft.status().ToString();
  EXPECT_TRUE(at_point);
  std::map<uint64_t, int> fills = Fills(*soft);
  EXPECT_EQ(fills, (std::map<uint64_t, int>{{big, 0x11}, {small, 0x22}, {freed, 0x33}, {untouched, 0x44}}));
  // Each copied before its write, as speculation named it: no write was missed.
  EXPECT_EQ(stats.copied_before_write, 3u);
  EXPECT_EQ(stats.missed_writes, 0u);

  // The session went on with what it wrote.
  EXPECT_EQ(Read(big + (8u << 20), 4), std::vector<uint8_t>(4, 0x55));
  EXPECT_EQ(Read(small, 32), [] {
    std::vector<uint8_t> v(32, 0x22);
    std::fill(v.begin(), v.begin() + 16, 0x66);
    return v;
  }());
  // A stop-the-world capture now holds it; a second soft capture too, the session idle meanwhile.
  Result<uint64_t> stopped = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60));
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_EQ(Fills(*stopped), (std::map<uint64_t, int>{{big, 0x55}, {small, -1}, {untouched, 0x44}}));
  options.at_point = nullptr;
  Result<uint64_t> again = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Fills(*again), Fills(*stopped));
  // The session serves on after the soft captures ended.
  Fill(untouched, 65536, 0x77);
  EXPECT_EQ(Read(untouched, 8), std::vector<uint8_t>(8, 0x77));
}

// A write speculation cannot see (a kernel writing through a pointer stored in device memory)
// during a soft capture is caught by the guard on the buffers not copied yet (simgpu): the buffer
// is copied before the write lands, and the image holds it as it was at the point.
TEST_F(ApiServerCaptureTest, AWriteSpeculationMissedIsCaughtAndTheImageHoldsThePoint) {
  ASSERT_NE(table_->phosSimGuardRangeWrites, nullptr);  // simgpu
  const std::string token = DeployToken();
  ASSERT_NO_FATAL_FAILURE(ConnectPointerTableWriter(token));
  const uint64_t other = client_.Alloc(8192);
  const std::vector<uint8_t> fill(8192, 0x11);
  ASSERT_EQ(client_.Upload(other, fill.data(), fill.size()), CUDA_SUCCESS);

  CaptureStats stats;
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftCow;
  options.stats = &stats;
  // Its parameters name only the table, which it reads.
  options.at_point = [&] { WriteThroughTable(99); };
  Result<uint64_t> version = server_->CaptureSession(token, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(stats.missed_writes, 1u);
  EXPECT_EQ(stats.copied_before_write, 0u);
  std::map<uint64_t, int> fills = Fills(*version);
  EXPECT_EQ(fills[target_], 0x11);
  EXPECT_EQ(fills[other], 0x11);
  // The write landed in the live session.
  std::vector<uint8_t> now = client_.Download(target_, 4);
  ASSERT_EQ(now.size(), 4u);
  int32_t written = 0;
  std::memcpy(&written, now.data(), sizeof(written));
  EXPECT_EQ(written, 99);
  server_->EndSession(token);
}

TEST_F(ApiServerCaptureTest, ASoftRecopyHoldsEveryBufferAsItWasAtItsFinalStop) {
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  const uint64_t big = Alloc(9u << 20);  // three pieces of the first copies
  const uint64_t small = Alloc(4096);
  const uint64_t freed = Alloc(65536);
  const uint64_t untouched = Alloc(65536);
  Fill(big, 9u << 20, 0x11);
  Fill(small, 4096, 0x22);
  Fill(freed, 65536, 0x33);
  Fill(untouched, 65536, 0x44);

  CaptureStats stats;
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftRecopy;
  options.stats = &stats;
  uint64_t fresh = 0;
  bool stopped = false;
  bool resumed = false;
  // While the first copies are taken, the session writes, frees and allocates.
  options.at_point = [&] {
    Fill(big, 9u << 20, 0x55);
    ipc::PointerArgs free_args{freed};
    EXPECT_EQ(Call(ipc::Op::kMemFree, &free_args, sizeof(free_args)), CUDA_SUCCESS);
    fresh = Alloc(8192);
    Fill(fresh, 8192, 0x88);
  };
  // Every first copy is in: a write now (the last before the stop) must still reach the image.
  options.final_stop = [&] {
    Fill(small, 4096, 0x99);
    stopped = true;
    return Status::Ok();
  };
  // After the final stop: not in the image.
  options.resumed = [&] {
    resumed = true;
    Fill(untouched, 65536, 0x77);
  };
  Result<uint64_t> version = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(resumed);
  EXPECT_EQ(Fills(*version),
            (std::map<uint64_t, int>{{big, 0x55}, {small, 0x99}, {untouched, 0x44}, {fresh, 0x88}}));
  // Copied again: the three written or made since the start; `untouched` kept its first copy.
  EXPECT_EQ(stats.recopied, 3u);
  EXPECT_EQ(stats.recopied_bytes, (9u << 20) + 4096u + 8192u);
  EXPECT_EQ(stats.missed_writes, 0u);
  EXPECT_EQ(Read(untouched, 8), std::vector<uint8_t>(8, 0x77));
}

// A migration's restore (SessionPlan::device): a snapshot captured on device 0 restored in the same
// instance range on device 1, where its memory then lives, holding the captured bytes.
TEST_F(ApiServerCaptureTest, ARestoreOnAnotherDeviceMapsTheCapturedBytesInThatDevicesMemory) {
  ASSERT_EQ(server_->device_count(), 2);  // PHOS_SIMGPU_DEVICES=2
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  constexpr uint64_t kBytes = 8u << 20;
  const uint64_t buffer = Alloc(kBytes);
  Fill(buffer, kBytes, 0x5a);
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftRecopy;
  options.final_stop = [] { return Status::Ok(); };
  Result<uint64_t> version = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  server_->EndSession(token_);  // the range unmapped on device 0

  // What device 1 holds, read in a context of its own.
  CUdevice one = 0;
  ASSERT_EQ(table_->cuDeviceGet(&one, 1), CUDA_SUCCESS);
  CUcontext probe = nullptr;
  ASSERT_EQ(table_->cuCtxCreate(&probe, nullptr, 0, one), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  table_->cuCtxPopCurrent(&popped);
  auto used_on_device_1 = [&] {
    driver::ContextScope scope(*table_, probe);
    size_t free = 0, total = 0;
    EXPECT_EQ(table_->cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return total - free;
  };
  const size_t before = used_on_device_1();

  Result<store::Manifest> manifest = store_->LoadManifest("fn", *version);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  SessionPlan plan;
  plan.function = "fn";
  plan.va_slot = slot_;
  plan.manifest = std::make_shared<const store::Manifest>(*manifest);
  plan.source = store_.get();
  plan.stop_the_world = true;  // every byte copied before the session serves
  plan.device = 1;
  const std::string moved = server_->IssueToken(std::move(plan));
  ASSERT_TRUE(server_->WaitPrepared(moved, std::chrono::seconds(60)).ok());
  EXPECT_GE(used_on_device_1() - before, kBytes);
  testing::RingClient client;
  ASSERT_TRUE(client.Connect(path_, moved));
  for (uint64_t at : {uint64_t{0}, kBytes / 2, kBytes - (64u << 10)}) {  // pieces the reply area holds
    EXPECT_EQ(client.Download(buffer + at, 64u << 10), std::vector<uint8_t>(64u << 10, 0x5a)) << "at " << at;
  }
  server_->EndSession(moved);
  EXPECT_LT(used_on_device_1() - before, kBytes);  // the session's end gave it back
  table_->cuCtxDestroy(probe);

  // A device the node does not have: the restore fails, and says why.
  SessionPlan nowhere;
  nowhere.function = "fn";
  nowhere.va_slot = slot_;
  nowhere.manifest = std::make_shared<const store::Manifest>(*manifest);
  nowhere.source = store_.get();
  nowhere.device = 2;
  const std::string lost = server_->IssueToken(std::move(nowhere));
  Status prepared = server_->WaitPrepared(lost, std::chrono::seconds(60));
  EXPECT_FALSE(prepared.ok());
  EXPECT_NE(prepared.message().find("no device 2"), std::string::npos) << prepared.ToString();
  server_->EndSession(lost);
}

TEST_F(ApiServerCaptureTest, ASoftRecopyThatCannotStopFailsAndTheSessionRunsOn) {
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  const uint64_t buffer = Alloc(65536);
  Fill(buffer, 65536, 0x11);
  Result<std::vector<uint64_t>> before = store_->ListVersions("fn");
  ASSERT_TRUE(before.ok());
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftRecopy;
  bool resumed = false;
  options.final_stop = [] { return Status::Unavailable("the instance ended"); };
  options.resumed = [&] { resumed = true; };
  Result<uint64_t> version = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), options);
  EXPECT_EQ(version.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(resumed);
  // Nothing committed; the buffers are no longer watched and the session serves on.
  EXPECT_EQ(*store_->ListVersions("fn"), *before);
  Fill(buffer, 65536, 0x22);
  EXPECT_EQ(Read(buffer, 8), std::vector<uint8_t>(8, 0x22));
}

// A write speculation cannot see, made after its buffer's first copy, is caught by the guard the
// recopy keeps on the buffers until its final stop (simgpu): the buffer is copied again there.
TEST_F(ApiServerCaptureTest, AWriteSpeculationMissedDuringARecopyReachesTheImage) {
  ASSERT_NE(table_->phosSimGuardRangeWrites, nullptr);  // simgpu
  const std::string token = DeployToken();
  ASSERT_NO_FATAL_FAILURE(ConnectPointerTableWriter(token));

  CaptureStats stats;
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftRecopy;
  options.stats = &stats;
  options.final_stop = [&] {
    // Its parameters name only the table, which it reads: nothing marks `target_` written.
    WriteThroughTable(99);
    return Status::Ok();
  };
  Result<uint64_t> version = server_->CaptureSession(token, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(stats.missed_writes, 1u);
  std::vector<uint8_t> image = Stored(*version, target_);
  ASSERT_EQ(image.size(), 8192u);
  int32_t written = 0;
  std::memcpy(&written, image.data(), sizeof(written));
  EXPECT_EQ(written, 99);
  EXPECT_TRUE(std::all_of(image.begin() + 4, image.end(), [](uint8_t v) { return v == 0x11; }));
  server_->EndSession(token);
}

// A migration's recopy (its session ends once the snapshot is committed) leaves its write guards
// to the session's end, which unmaps the range without lifting them first (simgpu). Device work
// that writes a guarded buffer meanwhile lifts the guard it faults on; the range's next session
// gets its addresses unguarded, the unmap having forgotten the rest.
TEST_F(ApiServerCaptureTest, AMigrationsRecopyLeavesItsGuardsToTheRangesUnmap) {
  ASSERT_NE(table_->phosSimGetStats, nullptr);  // simgpu
  const std::string token = DeployToken();
  ASSERT_NO_FATAL_FAILURE(ConnectPointerTableWriter(token));
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftRecopy;
  options.final_stop = [] { return Status::Ok(); };
  options.session_ends = true;
  Result<uint64_t> version = server_->CaptureSession(token, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  // Still guarded: a guard over it is refused as overlapping.
  EXPECT_EQ(table_->phosSimGuardRangeWrites(pointer_table_, 4096), CUDA_ERROR_INVALID_VALUE);

  // A write from outside the session's calls (no call of it releases the capture first) faults
  // once, and its guard goes.
  CUcontext writer = nullptr;
  ASSERT_EQ(table_->cuCtxCreate(&writer, nullptr, 0, 0), CUDA_SUCCESS);
  PhosSimStats before{}, after{};
  ASSERT_EQ(table_->phosSimGetStats(0, &before), CUDA_SUCCESS);
  EXPECT_EQ(table_->cuMemsetD8(target_, 0x5c, 8192), CUDA_SUCCESS);
  EXPECT_EQ(table_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(table_->cuMemsetD8(target_, 0x5d, 8192), CUDA_SUCCESS);  // lifted: no second fault
  EXPECT_EQ(table_->cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(table_->phosSimGetStats(0, &after), CUDA_SUCCESS);
  EXPECT_EQ(after.guard_faults - before.guard_faults, 1u);
  EXPECT_EQ(client_.Download(target_, 8), std::vector<uint8_t>(8, 0x5d));
  table_->cuCtxDestroy(writer);
  server_->EndSession(token, RangeRelease::kUnmappedZeroedBehind);

  // The next session of the range gets the same addresses, zeroed and unguarded.
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  const uint64_t again = Alloc(8192);
  const uint64_t table = Alloc(4096);
  EXPECT_EQ(again, target_);
  EXPECT_EQ(table, pointer_table_);
  EXPECT_EQ(Read(table, 8), std::vector<uint8_t>(8, 0));
  ASSERT_EQ(table_->phosSimGuardRangeWrites(table, 4096), CUDA_SUCCESS);  // no guard left to overlap
  ASSERT_EQ(table_->phosSimUnguardRange(table, 4096), CUDA_SUCCESS);
  Fill(table, 4096, 0x67);
  EXPECT_EQ(Read(table, 8), std::vector<uint8_t>(8, 0x67));
}

// A session's executor with nothing in its ring sleeps for as long as the server's idle wait, here
// ten minutes: a capture posted to it wakes it rather than waiting that out (it would time out).
class ApiServerIdleCaptureTest : public ApiServerCaptureTest {
 protected:
  void Configure(ApiServerOptions& options) override { options.executor_idle_wait = std::chrono::minutes(10); }
};

TEST_F(ApiServerIdleCaptureTest, ACaptureWakesTheExecutorOfAnIdleSession) {
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  const uint64_t buffer = Alloc(65536);
  Fill(buffer, 65536, 0x44);
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return ring_->header()->server_sleeping.load() != 0; }));
  CaptureOptions options;
  options.mode = CheckpointMode::kSoftCow;
  Result<uint64_t> version = server_->CaptureSession(token_, *store_, "fn", "ci", std::chrono::seconds(60), options);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(Fills(*version)[buffer], 0x44);
}

// An instance that moves is marked before its process ends. The process's end closes its control
// socket, and the server may end the session before the instance's thread does: the range's
// zeroing is still left behind, off the move's path.
TEST_F(ApiServerCaptureTest, AMovingSessionEndedByItsClosedSocketLeavesItsZeroingBehind) {
  const uint64_t before = server_->ranges_zeroed_behind();
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  Fill(Alloc(65536), 65536, 0x33);
  server_->MarkMoving(token_);
  close(sock_);  // the process ended
  sock_ = -1;
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return server_->session_count() == 0; }));
  server_->EndSession(token_);  // the instance's thread, after: nothing is left to end
  EXPECT_EQ(server_->ranges_zeroed_behind(), before + 1);
}

// The same end without the mark zeroes the range before the session is gone.
TEST_F(ApiServerCaptureTest, ASessionEndedByItsClosedSocketIsZeroedAtItsEnd) {
  const uint64_t before = server_->ranges_zeroed_behind();
  ASSERT_NO_FATAL_FAILURE(Open(DeployToken()));
  Fill(Alloc(65536), 65536, 0x33);
  close(sock_);
  sock_ = -1;
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return server_->session_count() == 0; }));
  EXPECT_EQ(server_->ranges_zeroed_behind(), before);
}

}  // namespace
}  // namespace phos::runtime
