// Module globals in snapshots: a global the function named is captured with its bytes and holds
// them again after a restore, wherever the restored module's global lies, including in a module
// its context kept loaded from the function's previous instance (which left other bytes there);
// the attributes and cache preferences an instance set on its kernels do not outlive it in a
// kept module. And a launch
// with launch attributes is speculated as the launch it is: its parameters, after the attributes,
// name the snapshot's buffers it reads and writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "phos/driver/driver_table.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/snapshot_capture.h"
#include "phos/runtime/snapshot_restore.h"
#include "phos/store/reader.h"
#include "phos/store/store.h"
#include "ring_client.h"

namespace phos::runtime {
namespace {

namespace fs = std::filesystem;
using testing::RingClient;

constexpr const char* kOffset = "_ZN7globals6offsetE";  // namespace globals { double offset; }
constexpr const char* kBumpOffset = "_Z11bump_offsetd";
constexpr const char* kScaleInWindow = "_Z15scale_in_windowPKfPfi";

class ModuleGlobalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    ASSERT_EQ(table_->cuInit(0), CUDA_SUCCESS);
    dir_ = fs::temp_directory_path() / ("phos-module-globals-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto store = store::Store::Open({.path = dir_.string(), .chunk_bytes = 64 << 10, .direct_io = false});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    image_ = testing::ReadFileBytes(PHOS_GLOBALS_TEST_MODULE);
    ASSERT_FALSE(image_.empty());
  }
  void TearDown() override {
    server_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  double ReadDouble(RingClient& client, uint64_t address) {
    std::vector<uint8_t> bytes = client.Download(address, sizeof(double));
    double value = -1;
    if (bytes.size() == sizeof(value)) std::memcpy(&value, bytes.data(), sizeof(value));
    return value;
  }

  std::shared_ptr<driver::DriverTable> table_;
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ApiServer> server_;
  std::vector<uint8_t> image_;
};

// CaptureGpuState reads each named global; the stop-the-world restore loads the module and writes
// the bytes back at the global's new address.
TEST_F(ModuleGlobalsTest, ACapturedGlobalHoldsItsBytesInTheRestoredModule) {
  CUcontext ctx = nullptr, fresh = nullptr;
  ASSERT_EQ(table_->cuCtxCreate(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
  CUmodule module = nullptr;
  ASSERT_EQ(table_->cuModuleLoadData(&module, image_.data()), CUDA_SUCCESS);
  CUdeviceptr offset = 0, table = 0;
  size_t offset_bytes = 0, table_bytes = 0;
  ASSERT_EQ(table_->cuModuleGetGlobal(&offset, &offset_bytes, module, kOffset), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuModuleGetGlobal(&table, &table_bytes, module, "scale_table"), CUDA_SUCCESS);
  const double value = 6.25;
  const float scales[8] = {0.5f, 1, 2, 3, 5, 8, 13, 21};
  ASSERT_EQ(table_->cuMemcpyHtoD(offset, &value, sizeof(value)), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuMemcpyHtoD(table, scales, sizeof(scales)), CUDA_SUCCESS);

  CaptureRequest request{
      .driver = table_.get(), .context = ctx, .function = "globals", .device_profile = "ci"};
  request.modules.push_back({.image = std::string(image_.begin(), image_.end()),
                             .kind = "simgpu",
                             .globals = {{.name = kOffset, .address = offset, .size = offset_bytes},
                                         {.name = "scale_table", .address = table, .size = table_bytes}}});
  Result<uint64_t> version = CaptureGpuState(request, *store_);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  Result<store::Manifest> manifest = store_->LoadManifest("globals", *version);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  ASSERT_EQ(manifest->modules.size(), 1u);
  ASSERT_EQ(manifest->modules[0].globals.size(), 2u);
  EXPECT_EQ(manifest->modules[0].globals[0].name, kOffset);
  EXPECT_EQ(manifest->modules[0].globals[0].contents,
            std::string(reinterpret_cast<const char*>(&value), sizeof(value)));

  ASSERT_EQ(table_->cuCtxCreate(&fresh, nullptr, 0, 0), CUDA_SUCCESS);
  auto pool = store::ReaderPool::Create({});
  ASSERT_TRUE(pool.ok());
  VmmDeviceMapper mapper(table_.get(), 0);
  Result<RestoreReport> report = RestoreStopTheWorld(
      {.driver = table_.get(), .context = fresh, .mapper = &mapper, .pool = pool->get()}, *manifest, *store_);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->modules.size(), 1u);
  CUdeviceptr restored = 0;
  ASSERT_EQ(table_->cuCtxSetCurrent(fresh), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuModuleGetGlobal(&restored, nullptr, report->modules[0], kOffset), CUDA_SUCCESS);
  EXPECT_NE(restored, offset);  // a module of its own, elsewhere
  double back = 0;
  ASSERT_EQ(table_->cuMemcpyDtoH(&back, restored, sizeof(back)), CUDA_SUCCESS);
  EXPECT_EQ(back, value);
  float scales_back[8] = {};
  ASSERT_EQ(table_->cuModuleGetGlobal(&restored, nullptr, report->modules[0], "scale_table"), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuMemcpyDtoH(scales_back, restored, sizeof(scales_back)), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(scales_back, scales, sizeof(scales)), 0);

  // A manifest whose global is not the module's, or not of its size, is refused by name.
  store::Module wrong = manifest->modules[0];
  wrong.globals[0].contents.push_back('x');
  Status s = WriteModuleGlobals(table_.get(), wrong, report->modules[0]);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(kOffset), std::string::npos) << s.message();
  wrong.globals[0] = {"not_a_global", "12345678"};
  EXPECT_EQ(WriteModuleGlobals(table_.get(), wrong, report->modules[0]).code(), StatusCode::kCorruption);
  table_->cuModuleUnload(report->modules[0]);
  table_->cuCtxDestroy(fresh);
  table_->cuCtxDestroy(ctx);
}

TEST_F(ModuleGlobalsTest, MoreGlobalBytesThanASnapshotKeepsAreRefusedBeforeAnythingIsRead) {
  CUcontext ctx = nullptr;
  ASSERT_EQ(table_->cuCtxCreate(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
  CaptureRequest request{
      .driver = table_.get(), .context = ctx, .function = "globals", .device_profile = "ci"};
  // Addresses nobody reads: the size is refused first.
  request.modules.push_back({.image = std::string(image_.begin(), image_.end()),
                             .kind = "simgpu",
                             .globals = {{.name = "big", .address = 0x1000, .size = store::kMaxGlobalBytes},
                                         {.name = "one_more", .address = 0x2000, .size = 1}}});
  Result<uint64_t> version = CaptureGpuState(request, *store_);
  EXPECT_EQ(version.status().code(), StatusCode::kFailedPrecondition) << version.status().ToString();
  request.modules[0].globals = {{.name = "", .address = 0x1000, .size = 8}};
  EXPECT_EQ(CaptureGpuState(request, *store_).status().code(), StatusCode::kInvalidArgument);
  table_->cuCtxDestroy(ctx);
}

// Deploy and two restores through the API server, as phosd runs them: the first restored
// instance changes the global and a kernel's attribute; the second, in the context that kept the
// module loaded for the function, finds the snapshot's bytes and the kernel as it loaded.
TEST_F(ModuleGlobalsTest, EveryRestoreFindsTheSnapshotsGlobalsEvenInAKeptModule) {
  const std::string path = "/tmp/phos-module-globals-test-" + std::to_string(getpid()) + ".sock";
  auto server =
      ApiServer::Start({.socket_path = path, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10}, table_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  Result<int> slot = server_->ClaimVaSlot();
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();

  // Deploy: the function sets its global and a kernel attribute, and holds a buffer.
  SessionPlan deploy;
  deploy.function = "globals";
  deploy.va_slot = *slot;
  const std::string deploy_token = server_->IssueToken(std::move(deploy));
  const double captured = 42.5;
  {
    RingClient client;
    ASSERT_TRUE(client.Connect(path, deploy_token));
    ASSERT_TRUE(client.SendModule(1, image_));
    ASSERT_NE(client.Alloc(4096), 0u);
    ipc::GlobalInfo offset{};
    ASSERT_EQ(client.Global(kOffset, &offset), CUDA_SUCCESS);
    ASSERT_EQ(client.Upload(offset.address, &captured, sizeof(captured)), CUDA_SUCCESS);
    const uint64_t scale = client.Function(kScaleInWindow);
    ASSERT_EQ(
        client.Call(ipc::Op::kFuncSetAttribute,
                    ipc::FuncAttributeArgs{scale, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000}),
        CUDA_SUCCESS);
    Result<uint64_t> version =
        server_->CaptureSession(deploy_token, *store_, "globals", "ci", std::chrono::milliseconds(30000));
    ASSERT_TRUE(version.ok()) << version.status().ToString();
    server_->EndSession(deploy_token);
  }
  Result<store::Manifest> manifest = store_->LoadManifest("globals", 1);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  ASSERT_EQ(manifest->modules.size(), 1u);
  ASSERT_EQ(manifest->modules[0].globals.size(), 1u);  // the one the function named
  auto shared = std::make_shared<const store::Manifest>(*manifest);

  auto restore = [&](double write_after, int32_t attribute_after, uint64_t* global_address) {
    SessionPlan plan;
    plan.function = "globals";
    plan.va_slot = *slot;
    plan.manifest = shared;
    plan.source = store_.get();
    const std::string token = server_->IssueToken(std::move(plan));
    EXPECT_TRUE(server_->WaitPrepared(token, std::chrono::milliseconds(30000)).ok());
    RingClient client;
    EXPECT_TRUE(client.Connect(path, token));
    EXPECT_TRUE(client.SendModule(1, image_));
    ipc::GlobalInfo offset{};
    EXPECT_EQ(client.Global(kOffset, &offset), CUDA_SUCCESS);
    *global_address = offset.address;
    const double found = ReadDouble(client, offset.address);
    // The kernel as its module loaded it: the deploy's setting was put back when its session ended.
    const uint64_t scale = client.Function(kScaleInWindow);
    EXPECT_EQ(client.Call(ipc::Op::kFuncGetAttributes, ipc::FunctionArgs{scale}), CUDA_SUCCESS);
    EXPECT_EQ(client.Reply<ipc::FunctionAttributes>().values[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES],
              49152);
    // No cache preference either: 128-thread blocks fill an SM 16 at a time (its warps' limit).
    EXPECT_EQ(client.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale, 0, 128, 0}), CUDA_SUCCESS);
    EXPECT_EQ(client.Reply<int32_t>(), 16);
    // The instance's own changes: a kernel moves the global on, and the attribute is raised.
    const uint64_t bump = client.Function(kBumpOffset);
    ipc::LaunchArgs launch{bump, 0, {1, 1, 1}, {1, 1, 1}, 0, 8};
    const double step = write_after / 2;
    EXPECT_EQ(client.Call(ipc::Op::kLaunch, launch, &step, sizeof(step)), CUDA_SUCCESS);
    EXPECT_EQ(ReadDouble(client, offset.address), found + write_after);
    EXPECT_EQ(client.Call(ipc::Op::kFuncSetAttribute,
                          ipc::FuncAttributeArgs{scale, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                 attribute_after}),
              CUDA_SUCCESS);
    // Preferring L1 leaves a block the least shared memory configuration that holds it (8 KiB for
    // its 1 KiB reserve): 8 blocks per SM.
    EXPECT_EQ(
        client.Call(ipc::Op::kFuncSetCacheConfig, ipc::FuncCacheConfigArgs{scale, CU_FUNC_CACHE_PREFER_L1, 0}),
        CUDA_SUCCESS);
    EXPECT_EQ(client.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale, 0, 128, 0}), CUDA_SUCCESS);
    EXPECT_EQ(client.Reply<int32_t>(), 8);
    server_->EndSession(token);
    return found;
  };
  uint64_t first_address = 0, second_address = 0;
  EXPECT_EQ(restore(/*write_after=*/10.0, /*attribute_after=*/120000, &first_address), captured);
  EXPECT_EQ(restore(/*write_after=*/20.0, /*attribute_after=*/130000, &second_address), captured);
  // The second restore ran in the module the first one's context kept: the same global, which
  // the first instance had left at captured + 10.
  EXPECT_EQ(second_address, first_address);
  server_->ReleaseVaSlot(*slot);
}

// A restore that learns (SessionPlan::learn_first_touch) notes each buffer a call's speculated sets
// name: a kLaunchEx's parameters come after its attributes, and name its input as read and its
// output as written; a buffer it does not name stays untouched.
TEST_F(ModuleGlobalsTest, ALaunchWithAttributesIsSpeculatedFromTheParametersAfterTheAttributes) {
  const std::string path = "/tmp/phos-module-globals-test-" + std::to_string(getpid()) + ".sock";
  auto server = ApiServer::Start({.socket_path = path, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10}, table_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  Result<int> slot = server_->ClaimVaSlot();
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  constexpr int kN = 64;
  uint64_t in = 0, out = 0, other = 0;
  {
    SessionPlan deploy;
    deploy.function = "launches";
    deploy.va_slot = *slot;
    const std::string token = server_->IssueToken(std::move(deploy));
    RingClient client;
    ASSERT_TRUE(client.Connect(path, token));
    ASSERT_TRUE(client.SendModule(1, image_));
    in = client.Alloc(kN * sizeof(float));
    out = client.Alloc(kN * sizeof(float));
    other = client.Alloc(kN * sizeof(float));
    ASSERT_TRUE(in != 0 && out != 0 && other != 0);
    Result<uint64_t> version =
        server_->CaptureSession(token, *store_, "launches", "ci", std::chrono::milliseconds(30000));
    ASSERT_TRUE(version.ok()) << version.status().ToString();
    server_->EndSession(token);
  }
  Result<store::Manifest> manifest = store_->LoadManifest("launches", 1);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  auto index_of = [&](uint64_t address) {
    for (size_t i = 0; i < manifest->buffers.size(); ++i) {
      if (manifest->buffers[i].device_address == address) return static_cast<int>(i);
    }
    return -1;
  };
  ASSERT_GE(index_of(in), 0);

  SessionPlan plan;
  plan.function = "launches";
  plan.va_slot = *slot;
  plan.manifest = std::make_shared<const store::Manifest>(*manifest);
  plan.source = store_.get();
  plan.learn_first_touch = true;
  const std::string token = server_->IssueToken(std::move(plan));
  ASSERT_TRUE(server_->WaitPrepared(token, std::chrono::milliseconds(30000)).ok());
  RingClient client;
  ASSERT_TRUE(client.Connect(path, token));
  ASSERT_TRUE(client.SendModule(1, image_));
  const uint64_t scale = client.Function(kScaleInWindow);
  ASSERT_NE(scale, 0u);
  // Two attributes before the parameters (in, out, n): hints, naming no memory.
  std::vector<uint8_t> tail(2 * sizeof(ipc::LaunchAttribute), 0);
  ipc::LaunchAttribute priority{};
  priority.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  ipc::LaunchAttribute serialization{};
  serialization.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  std::memcpy(tail.data(), &priority, sizeof(priority));
  std::memcpy(tail.data() + sizeof(priority), &serialization, sizeof(serialization));
  const int32_t n = kN;
  uint8_t params[20] = {};
  std::memcpy(params, &in, 8);
  std::memcpy(params + 8, &out, 8);
  std::memcpy(params + 16, &n, 4);
  tail.insert(tail.end(), params, params + sizeof(params));
  ipc::LaunchExArgs launch{{scale, 0, {1, 1, 1}, {64, 1, 1}, 0, sizeof(params)}, 2, 0};
  ASSERT_EQ(client.Call(ipc::Op::kLaunchEx, launch, tail.data(), tail.size()), CUDA_SUCCESS);
  ASSERT_EQ(client.Call(ipc::Op::kDeviceSynchronize, nullptr, 0), CUDA_SUCCESS);
  LearnedUsage learned = server_->TakeLearnedUsage(token);
  ASSERT_EQ(learned.first_touch.size(), manifest->buffers.size());
  EXPECT_GE(learned.first_touch[index_of(in)], 0);
  EXPECT_FALSE(learned.written[index_of(in)]);  // const float*: read only
  EXPECT_GE(learned.first_touch[index_of(out)], 0);
  EXPECT_TRUE(learned.written[index_of(out)]);
  EXPECT_EQ(learned.first_touch[index_of(other)], -1);
  server_->EndSession(token);
  server_->ReleaseVaSlot(*slot);
}

}  // namespace
}  // namespace phos::runtime
