// Guarded ranges (phosSimGuardRange, phosSimSetGuardHandler, phosSimWriteGuarded): device work
// touching a guarded buffer is held while a handler makes it resident, then runs on with the
// right data; without a handler it is an illegal address as before.
#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "phos/simgpu/simgpu.h"

namespace {

constexpr int kInts = 4096;  // 16 KiB: four pages
constexpr size_t kBytes = kInts * sizeof(int);

class SimgpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PhosSimConfig config{"ci", 10.0, 1, 1ull << 30};
    ASSERT_EQ(phosSimConfigure(&config), CUDA_SUCCESS);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SimgpuEnvironment);

// What the handler saw and what it restores: each guarded buffer's intended contents.
struct Residency {
  struct Buffer {
    CUdeviceptr ptr;
    std::vector<int> data;
  };
  std::mutex mu;
  std::vector<Buffer> buffers;
  std::vector<CUdeviceptr> addresses;
  std::vector<std::string> whats;
  PhosSimGuardDecision decision = PHOS_SIM_GUARD_RETRY;
  std::chrono::milliseconds delay{0};
  bool write_ok = true;
};

PhosSimGuardDecision MakeResident(void* user, CUdeviceptr address, const char* what) {
  auto* r = static_cast<Residency*>(user);
  std::lock_guard lock(r->mu);
  r->addresses.push_back(address);
  r->whats.emplace_back(what);
  std::this_thread::sleep_for(r->delay);
  for (const Residency::Buffer& b : r->buffers) {
    if (address >= b.ptr && address < b.ptr + b.data.size() * sizeof(int)) {
      r->write_ok &= phosSimWriteGuarded(b.ptr, b.data.data(), b.data.size() * sizeof(int)) == CUDA_SUCCESS;
    }
  }
  return r->decision;
}

std::vector<int> Iota(int first) {
  std::vector<int> v(kInts);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class GuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
    std::ifstream f(PHOS_FAULTS_MODULE, std::ios::binary);
    std::vector<char> image{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    ASSERT_FALSE(image.empty());
    ASSERT_EQ(cuModuleLoadData(&module_, image.data()), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&add_one_, module_, "_Z7add_onePKiPii"), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&sum_through_, module_, "_Z11sum_throughPKPKiPii"), CUDA_SUCCESS);
    ASSERT_EQ(phosSimResetStats(0), CUDA_SUCCESS);
    ASSERT_EQ(phosSimSetGuardHandler(MakeResident, &residency_), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(phosSimSetGuardHandler(nullptr, nullptr), CUDA_SUCCESS);
    if (ctx_ != nullptr) {
      EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
    }
  }

  // A device buffer of kInts (zeroed, as new allocations are) whose intended contents the handler writes
  // back.
  CUdeviceptr GuardedBuffer(std::vector<int> data) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAlloc(&p, kBytes), CUDA_SUCCESS);
    EXPECT_EQ(phosSimGuardRange(p, kBytes), CUDA_SUCCESS);
    residency_.buffers.push_back({p, std::move(data)});
    return p;
  }
  CUresult AddOne(CUdeviceptr in, CUdeviceptr out, CUstream stream = nullptr) {
    int n = kInts;
    void* params[] = {&in, &out, &n};
    return cuLaunchKernel(add_one_, kInts / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  unsigned long long GuardFaults() {
    PhosSimStats stats{};
    EXPECT_EQ(phosSimGetStats(0, &stats), CUDA_SUCCESS);
    return stats.guard_faults;
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction add_one_ = nullptr;
  CUfunction sum_through_ = nullptr;
  Residency residency_;
};

TEST_F(GuardTest, KernelReadingAGuardedBufferWaitsForTheHandlerAndSeesItsData) {
  const CUdeviceptr in = GuardedBuffer(Iota(100));
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&out, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(in, out), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);

  std::vector<int> result(kInts);
  ASSERT_EQ(cuMemcpyDtoH(result.data(), out, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(result, Iota(101));
  ASSERT_FALSE(residency_.addresses.empty());
  for (CUdeviceptr a : residency_.addresses) {
    EXPECT_GE(a, in);
    EXPECT_LT(a, in + kBytes);
  }
  EXPECT_EQ(residency_.whats.front(), "_Z7add_onePKiPii");
  EXPECT_TRUE(residency_.write_ok);
  // One call made the whole range resident and unguarded it; later faults found it unguarded.
  EXPECT_EQ(residency_.addresses.size(), 1u);
  EXPECT_GE(GuardFaults(), 1u);
  EXPECT_EQ(phosSimUnguardRange(in, kBytes), CUDA_ERROR_INVALID_VALUE);
}

// A guard of writes only (phosSimGuardRangeWrites): work reading the range runs on without the
// handler; the first write is held for it, and once it says retry the write lands.
TEST_F(GuardTest, AWriteGuardLetsReadsThroughAndHoldsTheFirstWrite) {
  CUdeviceptr in = 0;
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&in, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&out, kBytes), CUDA_SUCCESS);
  const std::vector<int> data = Iota(7);
  ASSERT_EQ(cuMemcpyHtoD(in, data.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(phosSimGuardRangeWrites(in, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(in, out), CUDA_SUCCESS);  // reads the guarded range
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(residency_.addresses.empty());
  std::vector<int> result(kInts);
  ASSERT_EQ(cuMemcpyDtoH(result.data(), in, kBytes), CUDA_SUCCESS);  // a copy engine reads it too
  EXPECT_EQ(result, Iota(7));
  ASSERT_EQ(AddOne(out, in), CUDA_SUCCESS);  // writes it
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(residency_.addresses.size(), 1u);
  EXPECT_GE(residency_.addresses[0], in);
  EXPECT_LT(residency_.addresses[0], in + kBytes);
  EXPECT_EQ(residency_.whats[0], "_Z7add_onePKiPii");
  ASSERT_EQ(cuMemcpyDtoH(result.data(), in, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(result, Iota(9));
  EXPECT_EQ(phosSimUnguardRange(in, kBytes), CUDA_ERROR_INVALID_VALUE);  // the retry unguarded it
  EXPECT_EQ(phosSimGuardRangeWrites(in + 4, kBytes - 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(phosSimGuardRangeWrites(in, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(in), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(out), CUDA_SUCCESS);
}

TEST_F(GuardTest, IndirectAccessThroughAPointerInDeviceMemoryIsCaught) {
  const CUdeviceptr data = GuardedBuffer(Iota(1));
  CUdeviceptr table = 0;
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&table, sizeof(CUdeviceptr)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&out, sizeof(int)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(table, &data, sizeof(data)), CUDA_SUCCESS);
  int n = kInts;
  void* params[] = {&table, &out, &n};
  ASSERT_EQ(cuLaunchKernel(sum_through_, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  int sum = 0;
  ASSERT_EQ(cuMemcpyDtoH(&sum, out, sizeof(sum)), CUDA_SUCCESS);
  EXPECT_EQ(sum, kInts * (kInts + 1) / 2);
  ASSERT_EQ(residency_.addresses.size(), 1u);
  EXPECT_EQ(residency_.addresses[0], data);
  EXPECT_EQ(residency_.whats[0], "_Z11sum_throughPKPKiPii");
  EXPECT_EQ(GuardFaults(), 1u);
}

TEST_F(GuardTest, CopiesTouchingGuardedRangesGoThroughTheHandler) {
  // Device to host (copy engine D2H).
  const CUdeviceptr src = GuardedBuffer(Iota(7));
  std::vector<int> host(kInts);
  ASSERT_EQ(cuMemcpyDtoH(host.data(), src, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(host, Iota(7));
  // Host to device (copy engine H2D): the copy overwrites what the handler restored.
  const CUdeviceptr dst = GuardedBuffer(Iota(0));
  const std::vector<int> fresh = Iota(50);
  ASSERT_EQ(cuMemcpyHtoD(dst, fresh.data(), kBytes), CUDA_SUCCESS);
  // Device to device (compute engine), from the now unguarded dst into a guarded buffer.
  const CUdeviceptr third = GuardedBuffer(Iota(0));
  ASSERT_EQ(cuMemcpyDtoD(third, dst, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host.data(), third, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(host, fresh);
  ASSERT_EQ(residency_.whats.size(), 3u);
  for (const std::string& what : residency_.whats) EXPECT_EQ(what, "memcpy");
  EXPECT_EQ(GuardFaults(), 3u);
}

TEST_F(GuardTest, WithoutAHandlerAGuardedTouchIsAnIllegalAddress) {
  ASSERT_EQ(phosSimSetGuardHandler(nullptr, nullptr), CUDA_SUCCESS);
  const CUdeviceptr in = GuardedBuffer(Iota(0));
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&out, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(in, out), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(residency_.addresses.empty());
  EXPECT_EQ(GuardFaults(), 0u);
}

TEST_F(GuardTest, AHandlerSayingFailFailsTheKernel) {
  residency_.decision = PHOS_SIM_GUARD_FAIL;
  const CUdeviceptr in = GuardedBuffer(Iota(0));
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&out, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(in, out), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_FALSE(residency_.addresses.empty());
  // FAIL leaves the range guarded.
  EXPECT_EQ(phosSimUnguardRange(in, kBytes), CUDA_SUCCESS);
}

TEST_F(GuardTest, UnguardRestoresAccessAndGuardingKeepsContents) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, kBytes), CUDA_SUCCESS);
  const std::vector<int> data = Iota(3);
  ASSERT_EQ(cuMemcpyHtoD(p, data.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(phosSimGuardRange(p, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(phosSimUnguardRange(p, kBytes), CUDA_SUCCESS);
  std::vector<int> back(kInts);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), p, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  EXPECT_TRUE(residency_.addresses.empty());
  EXPECT_EQ(GuardFaults(), 0u);
}

TEST_F(GuardTest, BadRangesAreRefused) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(phosSimGuardRange(p + 256, 4096), CUDA_ERROR_INVALID_VALUE);     // not page-aligned
  EXPECT_EQ(phosSimGuardRange(p, 0), CUDA_ERROR_INVALID_VALUE);              // empty
  EXPECT_EQ(phosSimGuardRange(p, kBytes + 4096), CUDA_ERROR_INVALID_VALUE);  // past the allocation
  int host = 0;
  EXPECT_EQ(phosSimGuardRange(reinterpret_cast<CUdeviceptr>(&host) & ~CUdeviceptr{4095}, 4096),
            CUDA_ERROR_INVALID_VALUE);  // not device memory
  ASSERT_EQ(phosSimGuardRange(p, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(phosSimGuardRange(p + 4096, 4096), CUDA_ERROR_INVALID_VALUE);  // overlaps
  EXPECT_EQ(phosSimUnguardRange(p, 4096), CUDA_ERROR_INVALID_VALUE);       // not as guarded
  EXPECT_EQ(phosSimWriteGuarded(p, nullptr, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(phosSimWriteGuarded(p + kBytes - 2, &host, 4), CUDA_ERROR_INVALID_VALUE);
  // Freeing ends the guard: the range is no longer guarded, and new memory there starts open.
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(phosSimUnguardRange(p, kBytes), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(GuardTest, SubPageSizesRoundUpToWholePages) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 100), CUDA_SUCCESS);
  ASSERT_EQ(phosSimGuardRange(p, 100), CUDA_SUCCESS);
  EXPECT_EQ(phosSimUnguardRange(p, 4096), CUDA_SUCCESS);
}

TEST_F(GuardTest, VmmMappingsAreGuardedAndWrittenThroughTheirBacking) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, granularity, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&handle, granularity, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, granularity, 0, handle, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(cuMemSetAccess(va, granularity, &access, 1), CUDA_SUCCESS);

  ASSERT_EQ(phosSimGuardRange(va, kBytes), CUDA_SUCCESS);
  residency_.buffers.push_back({va, Iota(-5)});
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&out, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(va, out), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<int> result(kInts);
  ASSERT_EQ(cuMemcpyDtoH(result.data(), out, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(result, Iota(-4));
  EXPECT_TRUE(residency_.write_ok);
  EXPECT_EQ(residency_.addresses.size(), 1u);

  ASSERT_EQ(cuMemUnmap(va, granularity), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, granularity), CUDA_SUCCESS);
}

TEST_F(GuardTest, KernelsOnTwoStreamsFaultingAtOnceAreBothServed) {
  // The handler takes its time, so the second kernel faults while the first is held.
  residency_.delay = std::chrono::milliseconds(50);
  const CUdeviceptr a = GuardedBuffer(Iota(1000));
  const CUdeviceptr b = GuardedBuffer(Iota(2000));
  CUdeviceptr out_a = 0;
  CUdeviceptr out_b = 0;
  ASSERT_EQ(cuMemAlloc(&out_a, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&out_b, kBytes), CUDA_SUCCESS);
  CUstream s1 = nullptr;
  CUstream s2 = nullptr;
  ASSERT_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(a, out_a, s1), CUDA_SUCCESS);
  ASSERT_EQ(AddOne(b, out_b, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<int> result(kInts);
  ASSERT_EQ(cuMemcpyDtoH(result.data(), out_a, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(result, Iota(1001));
  ASSERT_EQ(cuMemcpyDtoH(result.data(), out_b, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(result, Iota(2001));
  // Each buffer made resident once, whichever worker touched it first.
  EXPECT_EQ(residency_.addresses.size(), 2u);
  EXPECT_GE(GuardFaults(), 2u);
  EXPECT_EQ(cuStreamDestroy(s1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s2), CUDA_SUCCESS);
}

TEST_F(GuardTest, OneKernelOnTwoWorkersTouchingOneRangeCallsTheHandlerOnce) {
  residency_.delay = std::chrono::milliseconds(50);
  const CUdeviceptr in = GuardedBuffer(Iota(0));
  CUdeviceptr out = 0;
  ASSERT_EQ(cuMemAlloc(&out, kBytes), CUDA_SUCCESS);
  // 16 blocks split across the compute workers, each faulting on its own part of the range.
  ASSERT_EQ(AddOne(in, out), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<int> result(kInts);
  ASSERT_EQ(cuMemcpyDtoH(result.data(), out, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(result, Iota(1));
  EXPECT_EQ(residency_.addresses.size(), 1u);
}

}  // namespace
