#include "phos/store/chunk.h"

#include <xxhash.h>

#include <gtest/gtest.h>

namespace phos::store {
namespace {

TEST(ChunkIdTest, OfMatchesXxh3And128CanonicalHex) {
  const std::string data = "phos snapshot chunk";
  ChunkId id = ChunkId::Of(data.data(), data.size());
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  EXPECT_EQ(id.low, h.low64);
  EXPECT_EQ(id.high, h.high64);
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  std::string hex;
  for (unsigned char b : canon.digest) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  EXPECT_EQ(id.ToHex(), hex);
}

TEST(ChunkIdTest, HexAndBytesRoundTrip) {
  ChunkId id{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(id.ToHex(), "fedcba98765432100123456789abcdef");
  auto from_hex = ChunkId::FromHex(id.ToHex());
  ASSERT_TRUE(from_hex.ok()) << from_hex.status().ToString();
  EXPECT_EQ(*from_hex, id);
  std::string bytes = id.ToBytes();
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0xef);  // low half first, little-endian
  auto from_bytes = ChunkId::FromBytes(bytes);
  ASSERT_TRUE(from_bytes.ok());
  EXPECT_EQ(*from_bytes, id);
}

TEST(ChunkIdTest, MalformedIdsRefused) {
  auto short_hex = ChunkId::FromHex("abc");
  ASSERT_FALSE(short_hex.ok());
  EXPECT_NE(short_hex.status().message().find("expected 32 hex digits"), std::string::npos);
  auto bad_digit = ChunkId::FromHex(std::string(31, '0') + "g");
  ASSERT_FALSE(bad_digit.ok());
  EXPECT_NE(bad_digit.status().message().find("'g' is not a hex digit"), std::string::npos);
  auto bad_bytes = ChunkId::FromBytes("short");
  ASSERT_FALSE(bad_bytes.ok());
  EXPECT_EQ(bad_bytes.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace phos::store
