// phos/kernel.h compiled by g++ in this process: the device built-ins and the block runner, without
// going through a module.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include "phos/kernel.h"

namespace {

using phos::kernel::sim::ParamLayout;

struct Vec3 {
  float x, y, z;
};
struct alignas(16) Aligned16 {
  double a;
  int b;
};

// The layouts nvcc gives these parameter lists (EIATTR_KPARAM_INFO, sm_80).
using Mixed = ParamLayout<char, double, int, float*, Vec3, Aligned16>;
static_assert(Mixed::kCount == 6);
static_assert(Mixed::kOffsets.at[0] == 0 && Mixed::kOffsets.at[1] == 8 && Mixed::kOffsets.at[2] == 16 &&
              Mixed::kOffsets.at[3] == 24 && Mixed::kOffsets.at[4] == 32 && Mixed::kOffsets.at[5] == 48);
static_assert(Mixed::kOffsets.at[6] == 64, "end of the buffer");
static_assert(Mixed::kSizes[4] == 12 && Mixed::kSizes[5] == 16);
using AfterPointer = ParamLayout<int, int*>;
static_assert(AfterPointer::kOffsets.at[1] == 8);
static_assert(ParamLayout<>::kCount == 0 && ParamLayout<>::kOffsets.at[0] == 0);

static_assert(sizeof(uint3) == 12 && sizeof(dim3) == 12 && alignof(dim3) == 4);
static_assert(std::is_trivially_copyable_v<dim3>);

TEST(SimModuleKernelHeaderTest, Dim3DefaultsToOne) {
  const dim3 d;
  EXPECT_EQ(d.x, 1u);
  EXPECT_EQ(d.y, 1u);
  EXPECT_EQ(d.z, 1u);
  const dim3 e(5, 6);
  EXPECT_EQ(e.z, 1u);
  const uint3 u = e;
  EXPECT_EQ(u.y, 6u);
}

TEST(SimModuleKernelHeaderTest, AtomicsReturnTheOldValue) {
  int i = 5;
  EXPECT_EQ(atomicAdd(&i, 3), 5);
  EXPECT_EQ(atomicSub(&i, 1), 8);
  EXPECT_EQ(atomicMax(&i, 4), 7);
  EXPECT_EQ(i, 7);
  EXPECT_EQ(atomicMax(&i, 9), 7);
  EXPECT_EQ(i, 9);
  EXPECT_EQ(atomicMin(&i, -2), 9);
  EXPECT_EQ(i, -2);
  EXPECT_EQ(atomicExch(&i, 11), -2);
  EXPECT_EQ(atomicCAS(&i, 10, 12), 11);  // mismatch: unchanged
  EXPECT_EQ(i, 11);
  EXPECT_EQ(atomicCAS(&i, 11, 12), 11);
  EXPECT_EQ(i, 12);

  unsigned u = 1;
  EXPECT_EQ(atomicAdd(&u, 2u), 1u);
  EXPECT_EQ(atomicMin(&u, 0u), 3u);
  unsigned long long ull = 1ull << 40;
  EXPECT_EQ(atomicAdd(&ull, 1ull), 1ull << 40);
  EXPECT_EQ(atomicCAS(&ull, (1ull << 40) + 1, 7ull), (1ull << 40) + 1);
  EXPECT_EQ(ull, 7ull);
  EXPECT_EQ(atomicMax(&ull, 8ull), 7ull);

  float f = 1.5f;
  EXPECT_EQ(atomicAdd(&f, 2.0f), 1.5f);
  EXPECT_EQ(f, 3.5f);
  EXPECT_EQ(atomicExch(&f, -1.0f), 3.5f);
  double d = 0.25;
  EXPECT_EQ(atomicAdd(&d, 0.5), 0.25);
  EXPECT_EQ(d, 0.75);
}

TEST(SimModuleKernelHeaderTest, FloatAtomicAddLosesNoUpdateUnderContention) {
  float sum = 0.0f;
  double dsum = 0.0;
  constexpr int kPerThread = 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        atomicAdd(&sum, 1.0f);
        atomicAdd(&dsum, 1.0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(sum, 2.0f * kPerThread);  // exact: integers below 2^24
  EXPECT_EQ(dsum, 2.0 * kPerThread);
}

TEST(SimModuleKernelHeaderTest, MathBuiltins) {
  EXPECT_FLOAT_EQ(rsqrtf(4.0f), 0.5f);
  EXPECT_FLOAT_EQ(__expf(0.0f), 1.0f);
  EXPECT_FLOAT_EQ(__fdividef(1.0f, 4.0f), 0.25f);
  EXPECT_EQ(__saturatef(1.5f), 1.0f);
  EXPECT_EQ(__saturatef(-0.5f), 0.0f);
  EXPECT_EQ(min(3, -4), -4);
  EXPECT_EQ(max(3u, 4u), 4u);
  EXPECT_EQ(max(-1.5f, 2.5f), 2.5f);
}

PHOS_GLOBAL void record_block_order(unsigned* out) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
  out[blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)] =
      blockIdx.x | (blockIdx.y << 8) | (blockIdx.z << 16);
}

// Linear block b is blockIdx (b % gx, b / gx % gy, b / (gx * gy)), and a range runs only its blocks.
TEST(SimModuleKernelHeaderTest, BlockRangeMapsLinearIndicesXFastest) {
  const PhosSimLaunchGeometry g{{3, 4, 2}, {2, 2, 1}};
  std::vector<unsigned> out(24, ~0u);
  unsigned* p = out.data();
  void* args[] = {&p};
  phos::kernel::sim::RunBlocks<&record_block_order>(&g, args, 5, 17);
  for (unsigned b = 0; b < 24; ++b) {
    const unsigned expected = b < 5 || b >= 17 ? ~0u : (b % 3) | ((b / 3 % 4) << 8) | ((b / 12) << 16);
    EXPECT_EQ(out[b], expected) << b;
  }
}

}  // namespace
