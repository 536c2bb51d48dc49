// The launch-attribute and module-global records (runtime/src/session_functions.cc) as a function
// process may send them: each hostile or malformed one is refused with the driver's error and
// changes nothing; the well-formed ones work, and a module global the session resolved is memory
// its copies, memsets and kernel parameters may name, while another owner's is not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "phos/driver/driver_table.h"
#include "phos/runtime/api_server.h"
#include "ring_client.h"

namespace phos::runtime {
namespace {

using testing::RingClient;

constexpr const char* kScaleInWindow = "_Z15scale_in_windowPKfPfi";  // (const float*, float*, int)
constexpr const char* kBumpOffset = "_Z11bump_offsetd";              // (double)

class ApiServerLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    path_ = "/tmp/phos-api-launch-test-" + std::to_string(getpid()) + ".sock";
    auto server =
        ApiServer::Start({.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10}, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    image_ = testing::ReadFileBytes(PHOS_GLOBALS_TEST_MODULE);
    ASSERT_FALSE(image_.empty());
    token_ = server_->IssueToken();
    ASSERT_TRUE(client_.Connect(path_, token_));
    ASSERT_TRUE(client_.SendModule(1, image_));
    scale_ = client_.Function(kScaleInWindow);
    ASSERT_NE(scale_, 0u);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->EndSession(token_);
  }

  // A launch of scale_in_window over n elements: its record and the parameter buffer after it.
  std::vector<uint8_t> ScaleParams(uint64_t in, uint64_t out, int32_t n) {
    std::vector<uint8_t> params(20, 0);
    std::memcpy(params.data(), &in, 8);
    std::memcpy(params.data() + 8, &out, 8);
    std::memcpy(params.data() + 16, &n, 4);
    return params;
  }
  ipc::LaunchArgs ScaleLaunch(uint32_t blocks, uint32_t shared = 0) {
    return ipc::LaunchArgs{scale_, 0, {blocks, 1, 1}, {32, 1, 1}, shared, 20};
  }
  // kLaunchEx with `attrs` then `params`.
  int32_t LaunchEx(const ipc::LaunchArgs& launch, const std::vector<ipc::LaunchAttribute>& attrs,
                   const std::vector<uint8_t>& params, uint32_t count_override = UINT32_MAX) {
    ipc::LaunchExArgs a{
        launch, count_override == UINT32_MAX ? static_cast<uint32_t>(attrs.size()) : count_override, 0};
    std::vector<uint8_t> tail(attrs.size() * sizeof(ipc::LaunchAttribute));
    if (!attrs.empty()) std::memcpy(tail.data(), attrs.data(), tail.size());
    tail.insert(tail.end(), params.begin(), params.end());
    return client_.Call(ipc::Op::kLaunchEx, a, tail.data(), tail.size());
  }
  static ipc::LaunchAttribute Attribute(uint32_t id) {
    ipc::LaunchAttribute a{};
    a.id = id;
    return a;
  }

  std::shared_ptr<driver::DriverTable> table_;
  std::unique_ptr<ApiServer> server_;
  std::string path_;
  std::string token_;
  std::vector<uint8_t> image_;
  RingClient client_;
  uint64_t scale_ = 0;
};

TEST_F(ApiServerLaunchTest, FunctionAttributesComeInOneRecordAndBadHandlesOrSizesAreRefused) {
  ASSERT_EQ(client_.Call(ipc::Op::kFuncGetAttributes, ipc::FunctionArgs{scale_}), CUDA_SUCCESS);
  const auto attrs = client_.Reply<ipc::FunctionAttributes>();
  EXPECT_EQ(attrs.results[CU_FUNC_ATTRIBUTE_NUM_REGS], CUDA_SUCCESS);
  EXPECT_EQ(attrs.values[CU_FUNC_ATTRIBUTE_NUM_REGS], 32);
  EXPECT_EQ(attrs.values[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES], 49152);
  EXPECT_EQ(attrs.values[CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES], 40);
  for (uint32_t i = CU_FUNC_ATTRIBUTE_MAX; i < ipc::kFunctionAttributeSlots; ++i) {
    EXPECT_EQ(attrs.results[i], CUDA_ERROR_INVALID_VALUE) << "slot " << i;
  }
  EXPECT_EQ(client_.Call(ipc::Op::kFuncGetAttributes, ipc::FunctionArgs{scale_ + 1}),
            CUDA_ERROR_INVALID_HANDLE);
  ipc::FunctionArgs short_record{scale_};
  EXPECT_EQ(client_.Call(ipc::Op::kFuncGetAttributes, &short_record, sizeof(short_record) - 1),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ApiServerLaunchTest, AttributeSettingsAreCheckedAgainstTheDevicesOptInLimit) {
  auto set = [&](uint64_t function, int32_t attribute, int32_t value) {
    return client_.Call(ipc::Op::kFuncSetAttribute, ipc::FuncAttributeArgs{function, attribute, value});
  };
  constexpr int32_t kOptin = 166912;  // the ci profile's (an A100's) opt-in limit
  EXPECT_EQ(set(scale_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kOptin + 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set(scale_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, -1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set(scale_, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);  // read-only
  EXPECT_EQ(set(scale_, 99, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set(scale_ + 16, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(client_.Call(ipc::Op::kFuncSetCacheConfig, ipc::FuncCacheConfigArgs{scale_, 7, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kFuncSetCacheConfig,
                         ipc::FuncCacheConfigArgs{scale_, CU_FUNC_CACHE_PREFER_L1, 0}),
            CUDA_SUCCESS);

  // A launch asking for more than the function's limit fails; within the raised limit it runs.
  const uint64_t buffer = client_.Alloc(256);
  const std::vector<uint8_t> params = ScaleParams(buffer, buffer, 0);
  const ipc::LaunchArgs big = ScaleLaunch(1, 100000);
  EXPECT_EQ(client_.Call(ipc::Op::kLaunch, big, params.data(), params.size()), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(set(scale_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kOptin), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kLaunch, big, params.data(), params.size()), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(ipc::Op::kFuncGetAttributes, ipc::FunctionArgs{scale_}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::FunctionAttributes>().values[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES],
            kOptin);
}

TEST_F(ApiServerLaunchTest, OccupancyIsTheDriversAndOutOfRangeQuestionsAreRefused) {
  ASSERT_EQ(client_.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale_, 0, 1024, 0}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<int32_t>(), 2);  // 2048 threads per SM
  ASSERT_EQ(client_.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale_, 48 * 1024, 128, 1}),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<int32_t>(), 3);  // 164 KiB per SM over 49 KiB per block
  EXPECT_EQ(client_.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale_, 0, 0, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale_, 0, -32, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{scale_, 0, 64, 8}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kOccupancyMaxBlocks, ipc::OccupancyArgs{77, 0, 64, 0}),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(client_.Call(ipc::Op::kOccupancyDynamicSMem, ipc::OccupancySMemArgs{scale_, 4, 128}),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<uint64_t>(), 41984u);
  EXPECT_EQ(client_.Call(ipc::Op::kOccupancyDynamicSMem, ipc::OccupancySMemArgs{scale_, 0, 128}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kOccupancyDynamicSMem, ipc::OccupancySMemArgs{scale_, 4, 0}),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ApiServerLaunchTest, LaunchesWithAttributesAreCheckedLikeLaunchesAndTheirAttributesToo) {
  const int32_t n = 64;
  const uint64_t in = client_.Alloc(n * 4), out = client_.Alloc(n * 4);
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i + 1);
  ASSERT_EQ(client_.Upload(in, host.data(), n * 4), CUDA_SUCCESS);
  ipc::GlobalInfo table{}, window{};
  ASSERT_EQ(client_.Global("scale_table", &table), CUDA_SUCCESS);
  ASSERT_EQ(client_.Global("window", &window), CUDA_SUCCESS);
  const float scales[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t whole[2] = {0, n};
  ASSERT_EQ(client_.Upload(table.address, scales, sizeof(scales)), CUDA_SUCCESS);
  ASSERT_EQ(client_.Upload(window.address, whole, sizeof(whole)), CUDA_SUCCESS);
  const std::vector<uint8_t> params = ScaleParams(in, out, n);
  const ipc::LaunchArgs launch = ScaleLaunch(2);

  std::vector<uint8_t> before = client_.Download(out, n * 4);
  // More attributes than a record may carry; fewer bytes than the count says; parameters that do
  // not match the kernel; a stream that does not exist.
  EXPECT_EQ(LaunchEx(launch, {}, params, ipc::kMaxLaunchAttributes + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(LaunchEx(launch, {Attribute(CU_LAUNCH_ATTRIBUTE_IGNORE)}, {}, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(LaunchEx(launch, {}, std::vector<uint8_t>(params.begin(), params.end() - 4)),
            CUDA_ERROR_INVALID_VALUE);
  ipc::LaunchArgs no_stream = launch;
  no_stream.stream = 12345;
  EXPECT_EQ(LaunchEx(no_stream, {}, params), CUDA_ERROR_INVALID_HANDLE);
  // An event that is not the session's; a window over memory it does not own; a cooperative grid;
  // a graph-only attribute.
  ipc::LaunchAttribute event = Attribute(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT);
  const uint64_t foreign_event = 0x7770;
  std::memcpy(event.value, &foreign_event, sizeof(foreign_event));
  EXPECT_EQ(LaunchEx(launch, {event}, params), CUDA_ERROR_INVALID_HANDLE);
  ipc::LaunchAttribute policy = Attribute(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW);
  const uint64_t elsewhere[2] = {0x1000, 4096};  // base_ptr, num_bytes
  std::memcpy(policy.value, elsewhere, sizeof(elsewhere));
  EXPECT_EQ(LaunchEx(launch, {policy}, params), CUDA_ERROR_INVALID_VALUE);
  ipc::LaunchAttribute cooperative = Attribute(CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
  cooperative.value[0] = 1;
  EXPECT_EQ(LaunchEx(launch, {cooperative}, params), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(LaunchEx(launch, {Attribute(CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)}, params),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(LaunchEx(launch, {Attribute(99)}, params),
            CUDA_ERROR_INVALID_VALUE);  // no attribute of CUDA 13's
  // A parameter holding another owner's device memory: phosd's own allocation.
  CUdeviceptr foreign = 0;
  {
    CUcontext ctx = nullptr;
    ASSERT_EQ(table_->cuCtxCreate(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(table_->cuMemAlloc(&foreign, 4096), CUDA_SUCCESS);
    EXPECT_EQ(LaunchEx(launch, {}, ScaleParams(in, foreign, n)), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(table_->cuMemFree(foreign), CUDA_SUCCESS);
    EXPECT_EQ(table_->cuCtxDestroy(ctx), CUDA_SUCCESS);
  }
  EXPECT_EQ(client_.Download(out, n * 4), before);  // none of it ran

  // The session's own event, a window over its own buffer, and hints: the kernel runs.
  ASSERT_EQ(client_.Call(ipc::Op::kEventCreate, ipc::FlagsArgs{CU_EVENT_DISABLE_TIMING, 0}), CUDA_SUCCESS);
  const uint64_t done = client_.Reply<uint64_t>();
  std::memcpy(event.value, &done, sizeof(done));
  const uint64_t own[2] = {in, n * 4};
  std::memcpy(policy.value, own, sizeof(own));
  ipc::LaunchAttribute serialization = Attribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  serialization.value[0] = 1;
  ASSERT_EQ(LaunchEx(launch, {Attribute(CU_LAUNCH_ATTRIBUTE_IGNORE), event, policy, serialization}, params),
            CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(ipc::Op::kEventSynchronize, ipc::HandleArgs{done}), CUDA_SUCCESS);
  std::vector<uint8_t> got = client_.Download(out, n * 4);
  ASSERT_EQ(got.size(), static_cast<size_t>(n * 4));
  for (int i = 0; i < n; ++i) {
    float v = 0;
    std::memcpy(&v, got.data() + 4 * i, 4);
    EXPECT_EQ(v, host[i] * scales[i % 8]) << i;
  }
}

TEST_F(ApiServerLaunchTest, AResolvedModuleGlobalIsMemoryTheSessionsCallsMayNameAndNothingMore) {
  ipc::GlobalInfo g{};
  const std::string bad = std::string("hit_count\0x", 11);
  ipc::FunctionGetArgs lookup{0, static_cast<uint32_t>(bad.size()), 0};
  EXPECT_EQ(client_.Call(ipc::Op::kModuleGlobalGet, lookup, bad.data(), bad.size()),
            CUDA_ERROR_INVALID_VALUE);
  lookup.name_bytes = 0;
  EXPECT_EQ(client_.Call(ipc::Op::kModuleGlobalGet, lookup), CUDA_ERROR_INVALID_VALUE);
  lookup.name_bytes = 9;  // more than follow
  EXPECT_EQ(client_.Call(ipc::Op::kModuleGlobalGet, lookup, "hit", 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Global("no_such_global", &g), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(client_.Global("hit_count", &g, /*module_id=*/5), CUDA_ERROR_NOT_FOUND);

  ipc::GlobalInfo offset{};
  ASSERT_EQ(client_.Global("_ZN7globals6offsetE", &offset), CUDA_SUCCESS);
  EXPECT_EQ(offset.bytes, sizeof(double));
  const double start = 2.5;
  ASSERT_EQ(client_.Upload(offset.address, &start, sizeof(start)), CUDA_SUCCESS);
  // A neighbour in the module's storage that the session has not named is not its memory yet:
  // hit_count, 16 bytes before offset (globals.cuh's variables in order, each at its alignment).
  const uint64_t hits_address = offset.address - 16;
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{hits_address, 8, 0, 0, 0}),
            CUDA_ERROR_INVALID_VALUE);
  ipc::GlobalInfo hits{};
  ASSERT_EQ(client_.Global("hit_count", &hits), CUDA_SUCCESS);
  EXPECT_EQ(hits.address, hits_address);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{hits_address, 8, 0, 0, 0}), CUDA_SUCCESS);
  // Past the global's end; freeing it (not an allocation of the session).
  const uint8_t nine[9] = {};
  EXPECT_EQ(client_.Upload(offset.address, nine, sizeof(nine)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kMemFree, ipc::PointerArgs{offset.address}), CUDA_ERROR_INVALID_VALUE);

  // A kernel parameter may hold the global's address, and the kernel writes through it.
  const uint64_t bump = client_.Function(kBumpOffset);
  ASSERT_NE(bump, 0u);
  const double step = 0.75;
  ipc::LaunchArgs launch{bump, 0, {1, 1, 1}, {1, 1, 1}, 0, 8};
  ASSERT_EQ(client_.Call(ipc::Op::kLaunch, launch, &step, sizeof(step)), CUDA_SUCCESS);
  std::vector<uint8_t> bytes = client_.Download(offset.address, sizeof(double));
  ASSERT_EQ(bytes.size(), sizeof(double));
  double now = 0;
  std::memcpy(&now, bytes.data(), sizeof(now));
  EXPECT_EQ(now, start + 2 * step);
  const uint64_t buffer = client_.Alloc(64);
  ASSERT_EQ(client_.Call(ipc::Op::kMemcpyDtoD, ipc::CopyArgs{buffer, offset.address, 8, 0}), CUDA_SUCCESS);
  ipc::LaunchArgs scale = ScaleLaunch(1);
  EXPECT_EQ(client_.Call(ipc::Op::kLaunch, scale, ScaleParams(offset.address, buffer, 0).data(), 20),
            CUDA_SUCCESS);

  // Another session's global is another owner's memory: its address is refused here.
  const std::string other_token = server_->IssueToken();
  RingClient other;
  ASSERT_TRUE(other.Connect(path_, other_token));
  ASSERT_TRUE(other.SendModule(1, image_));
  ipc::GlobalInfo theirs{};
  ASSERT_EQ(other.Global("_ZN7globals6offsetE", &theirs), CUDA_SUCCESS);
  ASSERT_NE(theirs.address, offset.address);
  EXPECT_EQ(client_.Upload(theirs.address, &start, sizeof(start)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kLaunch, scale, ScaleParams(theirs.address, buffer, 0).data(), 20),
            CUDA_ERROR_INVALID_VALUE);
  std::vector<uint8_t> untouched = other.Download(theirs.address, sizeof(double));
  EXPECT_EQ(untouched, std::vector<uint8_t>(sizeof(double), 0));
  server_->EndSession(other_token);
}

// The driver API's module records: a module's load result is asked by its id, and an unload takes
// its kernels and globals with it on every device; ids the session does not hold are refused.
TEST_F(ApiServerLaunchTest, AnUnloadedModulesKernelsAndGlobalsAreNoLongerTheSessions) {
  EXPECT_EQ(client_.Call(ipc::Op::kModuleLoadResult, ipc::HandleArgs{1}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kModuleLoadResult, ipc::HandleArgs{2}), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(client_.Call(ipc::Op::kModuleUnload, ipc::HandleArgs{2}), CUDA_ERROR_INVALID_HANDLE);
  // An image that is no module phosd trusts loads as nothing and says so.
  std::vector<uint8_t> junk(4096, 0x5a);
  ASSERT_TRUE(client_.SendModule(3, junk));
  EXPECT_EQ(client_.Call(ipc::Op::kModuleLoadResult, ipc::HandleArgs{3}), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(client_.Call(ipc::Op::kModuleUnload, ipc::HandleArgs{3}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kModuleLoadResult, ipc::HandleArgs{3}), CUDA_ERROR_INVALID_HANDLE);

  ipc::GlobalInfo offset{};
  ASSERT_EQ(client_.Global("_ZN7globals6offsetE", &offset), CUDA_SUCCESS);
  const uint64_t buffer = client_.Alloc(64);
  ASSERT_NE(buffer, 0u);
  ipc::LaunchArgs scale = ScaleLaunch(1);
  ASSERT_EQ(client_.Call(ipc::Op::kLaunch, scale, ScaleParams(buffer, buffer, 16).data(), 20), CUDA_SUCCESS);
  // Unloaded while its kernel may still be queued: the unload waits for it.
  EXPECT_EQ(client_.Call(ipc::Op::kModuleUnload, ipc::HandleArgs{1}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kLaunch, scale, ScaleParams(buffer, buffer, 16).data(), 20),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(client_.Call(ipc::Op::kFuncGetAttributes, ipc::FunctionArgs{scale_}), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(client_.Function(kScaleInWindow), 0u);
  const double value = 1.0;
  EXPECT_EQ(client_.Upload(offset.address, &value, sizeof(value)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kModuleUnload, ipc::HandleArgs{1}), CUDA_ERROR_INVALID_HANDLE);
  // The same image loads again under a new id, with its global zeroed as a fresh load has it.
  ASSERT_TRUE(client_.SendModule(4, image_));
  EXPECT_EQ(client_.Call(ipc::Op::kModuleLoadResult, ipc::HandleArgs{4}), CUDA_SUCCESS);
  EXPECT_NE(client_.Function(kScaleInWindow, 4), 0u);
}

// cuMemsetD16 and cuMemsetD32: the element repeated over the range; a destination or length off
// the element's alignment, or an element of another size, is refused and writes nothing.
TEST_F(ApiServerLaunchTest, WideMemsetsRepeatTheirElementAndRefuseWhatIsOffItsAlignment) {
  const uint64_t buffer = client_.Alloc(64);
  ASSERT_NE(buffer, 0u);
  ASSERT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer, 64, 0, 0, 1}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer, 16, 0, 0xa1b2c3d4u, 4}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer + 16, 8, 0, 0x0000beefu, 2}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer + 2, 8, 0, 1, 4}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer + 32, 6, 0, 1, 4}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer + 33, 2, 0, 1, 2}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer + 32, 6, 0, 1, 3}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(ipc::Op::kMemset, ipc::MemsetArgs{buffer + 60, 8, 0, 1, 4}), CUDA_ERROR_INVALID_VALUE);
  std::vector<uint8_t> expect(64, 0);
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = 0xa1b2c3d4u;
    std::memcpy(expect.data() + 4 * i, &word, 4);
  }
  for (int i = 0; i < 4; ++i) {
    const uint16_t half = 0xbeef;
    std::memcpy(expect.data() + 16 + 2 * i, &half, 2);
  }
  EXPECT_EQ(client_.Download(buffer, 64), expect);
}

}  // namespace
}  // namespace phos::runtime
