#include "phos/runtime/buffer_table.h"

#include <gtest/gtest.h>

namespace phos::runtime {
namespace {

TEST(BufferTableTest, ContainsOnlyWholeRangesInsideOneBuffer) {
  BufferTable t;
  ASSERT_TRUE(t.Insert(0x1000, 0x1000).ok());
  ASSERT_TRUE(t.Insert(0x2000, 0x100).ok());
  EXPECT_TRUE(t.Contains(0x1000, 0x1000));
  EXPECT_TRUE(t.Contains(0x1fff, 1));
  EXPECT_FALSE(t.Contains(0x1fff, 2));  // spans two adjacent buffers: not one allocation
  EXPECT_FALSE(t.Contains(0xfff, 1));
  EXPECT_TRUE(t.Contains(0x20ff, 0));
  EXPECT_FALSE(t.Contains(0x2100, 0));
  EXPECT_EQ(t.total_bytes(), 0x1100u);
}

TEST(BufferTableTest, OverlapsAndUnknownFreesAreRefused) {
  BufferTable t;
  ASSERT_TRUE(t.Insert(0x1000, 0x1000).ok());
  EXPECT_FALSE(t.Insert(0x1800, 0x100).ok());
  EXPECT_FALSE(t.Insert(0x800, 0x900).ok());
  EXPECT_FALSE(t.Insert(0x5000, 0).ok());
  EXPECT_EQ(t.Erase(0x1800).code(), StatusCode::kNotFound);
  ASSERT_TRUE(t.Erase(0x1000).ok());
  EXPECT_FALSE(t.Contains(0x1000, 1));
  Status s = t.Check(0x1000, 8, "copy source");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("copy source 0x1000+8"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace phos::runtime
