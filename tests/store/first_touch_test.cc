// Store::SetFirstTouchOrder and Store::SetAccessClasses: what is learned about a snapshot's buffers
// after a commit (first-touch order, access classes) is written into the committed manifest in
// place, without touching its chunks, and is refused for bad input.
#include <gtest/gtest.h>

#include "phos/store/store.h"
#include "store_test_util.h"

namespace phos::store {
namespace {

constexpr uint32_t kChunk = 4096;

class FirstTouchTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = OpenStore(false); }

  std::unique_ptr<Store> OpenStore(bool read_only) {
    StoreOptions options;
    options.path = dir_.path();
    options.chunk_bytes = kChunk;
    options.read_only = read_only;
    auto store = Store::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  // A snapshot of three buffers of 2, 1 and 3 chunks, none ranked yet.
  uint64_t CommitThreeBuffers(const std::string& function) {
    auto w = store_->NewWriter(function).value();
    for (int i = 0; i < 3; ++i) {
      Buffer meta;
      meta.device_address = 0x7f0000000000ull + static_cast<uint64_t>(i) * 0x100000;
      meta.size = kSizes[i];
      meta.first_touch_rank = -1;
      meta.label = "buffer" + std::to_string(i);
      data_.push_back(testing::Bytes(kSizes[i], static_cast<uint64_t>(i) + 11));
      EXPECT_TRUE(w->AddBuffer(meta, data_.back().data()).ok());
    }
    auto version = store_->Commit(std::move(w));
    EXPECT_TRUE(version.ok()) << version.status().ToString();
    return version.ok() ? *version : 0;
  }
  std::vector<int32_t> Ranks(const std::string& function, uint64_t version) {
    std::vector<int32_t> out;
    auto m = store_->LoadManifest(function, version);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (m.ok()) {
      for (const auto& b : m->buffers) out.push_back(b.first_touch_rank);
    }
    return out;
  }

  std::vector<AccessClass> Classes(const std::string& function, uint64_t version) {
    std::vector<AccessClass> out;
    auto m = store_->LoadManifest(function, version);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (m.ok()) {
      for (const auto& b : m->buffers) out.push_back(b.access_class);
    }
    return out;
  }

  static constexpr size_t kSizes[3] = {2 * kChunk, kChunk, 3 * kChunk};
  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::vector<std::vector<char>> data_;
};

TEST_F(FirstTouchTest, RanksRoundTripAndSurviveReopening) {
  const uint64_t v = CommitThreeBuffers("mlp");
  ASSERT_EQ(Ranks("mlp", v), (std::vector<int32_t>{-1, -1, -1}));
  ASSERT_TRUE(store_->SetFirstTouchOrder("mlp", v, {1, -1, 0}).ok());
  EXPECT_EQ(Ranks("mlp", v), (std::vector<int32_t>{1, -1, 0}));
  // Learned again (a later invocation): replaced, not merged.
  ASSERT_TRUE(store_->SetFirstTouchOrder("mlp", v, {0, 1, 2}).ok());
  store_.reset();
  store_ = OpenStore(false);
  EXPECT_EQ(Ranks("mlp", v), (std::vector<int32_t>{0, 1, 2}));
}

TEST_F(FirstTouchTest, ChunksRefcountsAndEverythingElseStayAsCommitted) {
  const uint64_t v = CommitThreeBuffers("mlp");
  const Manifest before = store_->LoadManifest("mlp", v).value();
  const StoreStats stats_before = store_->Stats().value();
  ASSERT_TRUE(store_->SetFirstTouchOrder("mlp", v, {2, 0, 1}).ok());

  Manifest after = store_->LoadManifest("mlp", v).value();
  ASSERT_EQ(after.buffers.size(), 3u);
  for (int i = 0; i < 3; ++i) after.buffers[i].first_touch_rank = -1;
  EXPECT_EQ(after, before);
  const StoreStats stats_after = store_->Stats().value();
  EXPECT_EQ(stats_after.chunks, stats_before.chunks);
  EXPECT_EQ(stats_after.live_chunks, stats_before.live_chunks);
  EXPECT_EQ(stats_after.segment_bytes, stats_before.segment_bytes);
  EXPECT_TRUE(store_->CheckConsistency().ok());
  EXPECT_TRUE(store_->VerifySnapshot("mlp", v).ok());

  // A reader holding the manifest loaded before the rewrite still reads every buffer.
  for (int i = 0; i < 3; ++i) {
    std::vector<char> got(kSizes[i]);
    ASSERT_TRUE(store_->ReadBuffer(before, i, got.data()).ok());
    EXPECT_EQ(got, data_[static_cast<size_t>(i)]);
  }
  // Deleting the version afterwards frees its chunks as usual: the refcounts were not disturbed.
  ASSERT_TRUE(store_->DeleteVersion("mlp", v).ok());
  EXPECT_EQ(store_->CollectGarbage().value().chunks_freed, stats_before.live_chunks);
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(FirstTouchTest, OtherVersionsAreUntouched) {
  const uint64_t v1 = CommitThreeBuffers("mlp");
  const uint64_t v2 = CommitThreeBuffers("mlp");
  ASSERT_TRUE(store_->SetFirstTouchOrder("mlp", v2, {0, 1, -1}).ok());
  EXPECT_EQ(Ranks("mlp", v1), (std::vector<int32_t>{-1, -1, -1}));
  EXPECT_EQ(Ranks("mlp", v2), (std::vector<int32_t>{0, 1, -1}));
}

TEST_F(FirstTouchTest, RefusesBadSizesAndRanks) {
  const uint64_t v = CommitThreeBuffers("mlp");
  Status s = store_->SetFirstTouchOrder("mlp", v, {0, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("2 ranks for 3 buffers"), std::string::npos) << s.ToString();
  EXPECT_EQ(store_->SetFirstTouchOrder("mlp", v, {0, 1, 2, 3}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->SetFirstTouchOrder("mlp", v, {}).code(), StatusCode::kInvalidArgument);
  s = store_->SetFirstTouchOrder("mlp", v, {0, -2, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("buffer 1"), std::string::npos) << s.ToString();
  // Nothing was written.
  EXPECT_EQ(Ranks("mlp", v), (std::vector<int32_t>{-1, -1, -1}));
}

TEST_F(FirstTouchTest, UnknownVersionOrFunctionIsNotFound) {
  const uint64_t v = CommitThreeBuffers("mlp");
  EXPECT_EQ(store_->SetFirstTouchOrder("mlp", v + 1, {0, 1, 2}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->SetFirstTouchOrder("nope", v, {0, 1, 2}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->DeleteVersion("mlp", v).ok());
  // A deleted version stays deleted: the rewrite does not bring it back.
  EXPECT_EQ(store_->SetFirstTouchOrder("mlp", v, {0, 1, 2}).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListVersions("mlp").value().size(), 0u);
}

TEST_F(FirstTouchTest, ReadOnlyStoreRefuses) {
  const uint64_t v = CommitThreeBuffers("mlp");
  store_.reset();
  store_ = OpenStore(true);
  ASSERT_NE(store_, nullptr);
  EXPECT_EQ(store_->SetFirstTouchOrder("mlp", v, {0, 1, 2}).code(), StatusCode::kFailedPrecondition);
}

TEST_F(FirstTouchTest, InspectShowsTheRanks) {
  const uint64_t v = CommitThreeBuffers("mlp");
  ASSERT_TRUE(store_->SetFirstTouchOrder("mlp", v, {7, -1, 0}).ok());
  store_.reset();
  testing::ToolRun run = testing::RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir_.path(), "inspect", "mlp"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string& out = run.output;
  EXPECT_NE(out.find("rank   7"), std::string::npos) << out;
  EXPECT_NE(out.find("rank  -1"), std::string::npos) << out;
  EXPECT_NE(out.find("rank   0"), std::string::npos) << out;
}

constexpr AccessClass kRO = AccessClass::kReadOnly;
constexpr AccessClass kRW = AccessClass::kReadWrite;
constexpr AccessClass kUnknown = AccessClass::kUnknown;

TEST_F(FirstTouchTest, AccessClassesRoundTripBesideTheRanks) {
  const uint64_t v = CommitThreeBuffers("mlp");
  const Manifest before = store_->LoadManifest("mlp", v).value();
  ASSERT_EQ(Classes("mlp", v), (std::vector<AccessClass>{kUnknown, kUnknown, kUnknown}));
  ASSERT_TRUE(store_->SetFirstTouchOrder("mlp", v, {1, -1, 0}).ok());
  ASSERT_TRUE(store_->SetAccessClasses("mlp", v, {kRO, kRW, kRO}).ok());
  store_.reset();
  store_ = OpenStore(false);
  EXPECT_EQ(Classes("mlp", v), (std::vector<AccessClass>{kRO, kRW, kRO}));
  EXPECT_EQ(Ranks("mlp", v), (std::vector<int32_t>{1, -1, 0}));  // one annotation keeps the other
  Manifest after = store_->LoadManifest("mlp", v).value();
  for (auto& b : after.buffers) {
    b.first_touch_rank = -1;
    b.access_class = kUnknown;
  }
  EXPECT_EQ(after, before);  // chunks and everything else as committed
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(FirstTouchTest, AccessClassesRefuseBadInput) {
  const uint64_t v = CommitThreeBuffers("mlp");
  Status s = store_->SetAccessClasses("mlp", v, {kRO, kRW});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("2 access classes for 3 buffers"), std::string::npos) << s.ToString();
  s = store_->SetAccessClasses("mlp", v, {kRO, static_cast<AccessClass>(9), kRW});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("buffer 1"), std::string::npos) << s.ToString();
  EXPECT_EQ(store_->SetAccessClasses("mlp", v + 1, {kRO, kRO, kRO}).code(), StatusCode::kNotFound);
  EXPECT_EQ(Classes("mlp", v), (std::vector<AccessClass>{kUnknown, kUnknown, kUnknown}));  // nothing written
  store_.reset();
  store_ = OpenStore(true);
  EXPECT_EQ(store_->SetAccessClasses("mlp", v, {kRO, kRO, kRO}).code(), StatusCode::kFailedPrecondition);
}

TEST_F(FirstTouchTest, InspectShowsTheAccessClasses) {
  const uint64_t v = CommitThreeBuffers("mlp");
  ASSERT_TRUE(store_->SetAccessClasses("mlp", v, {kRO, kRW, kUnknown}).ok());
  store_.reset();
  testing::ToolRun run = testing::RunTool(PHOS_SNAPSHOT_TOOL, {"--store", dir_.path(), "inspect", "mlp"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("read-only  buffer0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("read-write  buffer1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("unknown  buffer2"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace phos::store
