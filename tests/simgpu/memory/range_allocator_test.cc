#include "memory/range_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace phos::sim {
namespace {

constexpr uint64_t kBase = 0x10000;
constexpr uint64_t kSize = 0x100000;

TEST(RangeAllocatorTest, FirstFitAndAlignment) {
  RangeAllocator ranges(kBase, kSize);
  uint64_t a = 0;
  uint64_t b = 0;
  ASSERT_TRUE(ranges.Allocate(0x100, 0x100, &a));
  EXPECT_EQ(a, kBase);
  ASSERT_TRUE(ranges.Allocate(0x100, 0x10000, &b));
  EXPECT_EQ(b % 0x10000, 0u);
  EXPECT_EQ(b, 0x20000u);
  EXPECT_EQ(ranges.free_bytes(), kSize - 0x200);
  // The gap left by alignment is still used by a later request that fits in it.
  uint64_t c = 0;
  ASSERT_TRUE(ranges.Allocate(0x1000, 0x1000, &c));
  EXPECT_EQ(c, kBase + 0x1000);
}

TEST(RangeAllocatorTest, RejectsZeroSizeBadAlignmentAndExhaustion) {
  RangeAllocator ranges(kBase, kSize);
  uint64_t out = 0;
  EXPECT_FALSE(ranges.Allocate(0, 0x1000, &out));
  EXPECT_FALSE(ranges.Allocate(0x1000, 0x1800, &out));
  EXPECT_FALSE(ranges.Allocate(kSize + 1, 1, &out));
  ASSERT_TRUE(ranges.Allocate(kSize, 1, &out));
  EXPECT_EQ(ranges.free_bytes(), 0u);
  EXPECT_FALSE(ranges.Allocate(1, 1, &out));
}

TEST(RangeAllocatorTest, AllocateAtTakesExactlyTheFreeRange) {
  RangeAllocator ranges(kBase, kSize);
  EXPECT_TRUE(ranges.AllocateAt(kBase + 0x8000, 0x4000));
  EXPECT_FALSE(ranges.AllocateAt(kBase + 0x8000, 0x1000));          // taken
  EXPECT_FALSE(ranges.AllocateAt(kBase + 0x7000, 0x2000));          // overlaps the start
  EXPECT_FALSE(ranges.AllocateAt(kBase + kSize - 0x1000, 0x2000));  // runs past the end
  EXPECT_FALSE(ranges.AllocateAt(kBase - 0x1000, 0x1000));          // before the base
  EXPECT_FALSE(ranges.AllocateAt(~0ull - 0x10, 0x100));             // wraps
  EXPECT_TRUE(ranges.AllocateAt(kBase + 0x7000, 0x1000));           // adjacent below
  EXPECT_FALSE(ranges.IsFree(kBase + 0x7000, 0x5000));
  EXPECT_TRUE(ranges.IsFree(kBase, 0x7000));
}

TEST(RangeAllocatorTest, ReleaseCoalescesInAnyOrder) {
  RangeAllocator ranges(kBase, kSize);
  uint64_t parts[4];
  for (uint64_t& p : parts) ASSERT_TRUE(ranges.Allocate(kSize / 4, 1, &p));
  ranges.Release(parts[1], kSize / 4);
  ranges.Release(parts[3], kSize / 4);
  uint64_t out = 0;
  EXPECT_FALSE(ranges.Allocate(kSize / 2, 1, &out));  // free space is split in two
  ranges.Release(parts[2], kSize / 4);
  ranges.Release(parts[0], kSize / 4);
  EXPECT_EQ(ranges.free_bytes(), kSize);
  ASSERT_TRUE(ranges.Allocate(kSize, 1, &out));
  EXPECT_EQ(out, kBase);
}

}  // namespace
}  // namespace phos::sim
