#include "device/handles.h"

#include <gtest/gtest.h>

#include <cuda.h>

namespace phos::sim {
namespace {

struct Thing {
  int value = 0;
};

using StreamTable = HandleTable<Thing, CUstream, HandleKind::kStream>;
using EventTable = HandleTable<Thing, CUevent, HandleKind::kEvent>;

TEST(HandleTableTest, InsertFindRemove) {
  StreamTable table;
  CUstream h = table.Insert(std::make_shared<Thing>(Thing{7}));
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(table.Find(h));
  EXPECT_EQ(table.Find(h)->value, 7);
  EXPECT_TRUE(table.Remove(h));
  EXPECT_FALSE(table.Find(h));
  EXPECT_FALSE(table.Remove(h));
}

TEST(HandleTableTest, HandlesAreNeverReusedAndStaleOnesAreKnown) {
  StreamTable table;
  CUstream first = table.Insert(std::make_shared<Thing>());
  ASSERT_TRUE(table.Remove(first));
  CUstream second = table.Insert(std::make_shared<Thing>());
  EXPECT_NE(first, second);
  EXPECT_FALSE(table.Find(first));
  EXPECT_TRUE(table.WasIssued(first));
}

TEST(HandleTableTest, ReservedStreamValuesAndGarbageAreRejected) {
  StreamTable table;
  table.Insert(std::make_shared<Thing>());
  for (uintptr_t v : {uintptr_t{0}, uintptr_t{1}, uintptr_t{2}, uintptr_t{0x10}, uintptr_t{0xdeadbeef}}) {
    auto h = reinterpret_cast<CUstream>(v);
    EXPECT_FALSE(table.Find(h)) << v;
    EXPECT_FALSE(table.WasIssued(h)) << v;
  }
}

TEST(HandleTableTest, WrongKindIsRejected) {
  StreamTable streams;
  EventTable events;
  CUstream s = streams.Insert(std::make_shared<Thing>());
  CUevent e = events.Insert(std::make_shared<Thing>());
  // Same id, other kind: a stream handle passed where an event is expected fails the lookup.
  EXPECT_FALSE(events.Find(reinterpret_cast<CUevent>(s)));
  EXPECT_FALSE(streams.Find(reinterpret_cast<CUstream>(e)));
}

TEST(HandleTableTest, SelectFindsMatchingObjects) {
  StreamTable table;
  CUstream a = table.Insert(std::make_shared<Thing>(Thing{1}));
  table.Insert(std::make_shared<Thing>(Thing{2}));
  CUstream c = table.Insert(std::make_shared<Thing>(Thing{1}));
  auto ones = table.Select([](const Thing& t) { return t.value == 1; });
  ASSERT_EQ(ones.size(), 2u);
  EXPECT_TRUE((ones[0] == a && ones[1] == c) || (ones[0] == c && ones[1] == a));
}

}  // namespace
}  // namespace phos::sim
