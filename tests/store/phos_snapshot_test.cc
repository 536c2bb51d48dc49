// The phos-snapshot tool against a real store: ls, inspect, verify (clean and corrupt), gc.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "phos/store/store.h"
#include "store_test_util.h"

namespace phos::store {
namespace {

using testing::RunTool;
using testing::ToolRun;

TEST(PhosSnapshotToolTest, LsInspectVerifyGc) {
  testing::TempDir dir;
  ChunkId bad;
  {
    StoreOptions options;
    options.path = dir.path();
    options.chunk_bytes = 4096;
    auto store = Store::Open(options).value();
    for (const char* f : {"mlp", "embed"}) {
      auto w = store->NewWriter(f).value();
      auto bytes = testing::Bytes(3 * 4096, f[0]);
      Buffer meta;
      meta.size = bytes.size();
      meta.label = "weights";
      ASSERT_TRUE(w->AddBuffer(meta, bytes.data()).ok());
      ASSERT_TRUE(store->Commit(std::move(w)).ok());
      if (f[0] == 'm') bad = ChunkId::Of(bytes.data(), 4096);
    }
  }
  ToolRun ls = RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "ls"});
  EXPECT_EQ(ls.exit_code, 0) << ls.output;
  EXPECT_NE(ls.output.find("mlp\tv1"), std::string::npos) << ls.output;
  ToolRun inspect = RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "inspect", "mlp"});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("snapshot 'mlp' v1"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("weights"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("dedup ratio 1.00"), std::string::npos) << inspect.output;
  EXPECT_EQ(RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "verify"}).exit_code, 0);
  EXPECT_EQ(RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "inspect", "nope"}).exit_code, 1);
  EXPECT_NE(RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "bogus"}).exit_code, 0);

  // mlp was committed first: its first chunk is at offset 0 of segment 1.
  int fd = ::open((dir.path() + "/segments/00000001.seg").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, 7), 1);
  c ^= 1;
  ASSERT_EQ(::pwrite(fd, &c, 1, 7), 1);
  ::close(fd);
  ToolRun verify = RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "verify"});
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("BAD  Corruption: snapshot 'mlp' v1: buffer 0"), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find(bad.ToHex()), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("ok   'embed' v1"), std::string::npos) << verify.output;
  ToolRun gc = RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir.path(), "gc"});
  EXPECT_EQ(gc.exit_code, 0) << gc.output;
  EXPECT_NE(gc.output.find("gc: 0 chunks freed"), std::string::npos) << gc.output;
}

}  // namespace
}  // namespace phos::store
