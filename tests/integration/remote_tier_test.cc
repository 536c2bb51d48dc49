// The remote snapshot tier with a real phosd and s3rver on loopback: a deploy's snapshots are
// uploaded to the bucket in the background, every chunk before its manifest, each chunk object
// holding its hash's bytes; phosd refuses to start on a bucket it cannot reach.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../testing/s3rver.h"
#include "mlp_expect.h"
#include "phos/store/manifest.h"
#include "phos/store/remote_chunks.h"
#include "phos/store/snapshot_uploader.h"
#include "phosd_fixture.h"

namespace phos::testing {
namespace {

constexpr const char* kBucket = "phos-snapshots";

class RemoteTierTest : public PhosdTest {
 protected:
  RemoteTierTest() {
    why_not_ = s3rver_.Start(kBucket);
    phosd_env_ = {{"AWS_ACCESS_KEY_ID", "S3RVER"}, {"AWS_SECRET_ACCESS_KEY", "S3RVER"}};
  }
  void SetUp() override {
    if (why_not_.find("not installed") != std::string::npos) GTEST_SKIP() << why_not_;
    ASSERT_EQ(why_not_, "");
    PhosdTest::SetUp();
  }
  std::vector<std::string> ExtraPhosdArgs() const override {
    return {"--s3-endpoint", s3rver_.endpoint(), "--s3-bucket", kBucket, "--node-name", "node-a"};
  }

  S3rver s3rver_;
  std::string why_not_;
};

TEST_F(RemoteTierTest, ADeploysSnapshotsAreUploadedChunksBeforeManifests) {
  CommandResult deployed =
      PhosFn({"deploy", "mlp", PHOS_MLP_FUNCTION, "--instances", "1", "--", "--size-mib", "16", "--layers", "4"});
  ASSERT_EQ(deployed.exit_code, 0) << deployed.out << PhosdLog();
  objstore::S3Client bucket(s3rver_.Options(kBucket));
  // mlp has a range per instance it may run and a spare: two snapshots, uploaded in the background.
  std::vector<std::string> manifests;
  ASSERT_TRUE(WaitUntil([&] {
    Result<std::vector<std::string>> listed = bucket.List("manifests/mlp/");
    if (listed.ok()) manifests = *listed;
    return manifests.size() == 2;
  })) << manifests.size() << " manifests uploaded\n" << PhosdLog();
  store::RemoteChunks chunks{objstore::S3Client(s3rver_.Options(kBucket))};
  for (const std::string& key : manifests) {
    Result<std::string> bytes = bucket.Get(key);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    Result<store::Manifest> manifest = store::DecodeManifest(*bytes);
    ASSERT_TRUE(manifest.ok()) << key << ": " << manifest.status().ToString();
    EXPECT_EQ(manifest->function, "mlp");
    EXPECT_EQ(key, store::SnapshotUploader::ManifestKey("mlp", "node-a", manifest->version));
    ASSERT_FALSE(manifest->buffers.empty());
    // Every chunk it names is in the bucket, its bytes the ones its id is the hash of.
    uint64_t bytes_read = 0;
    for (const store::ChunkRef& ref : store::ChunksOf(*manifest)) {
      std::string into(ref.size, '\0');
      Status read = chunks.ReadChunk(ref, into.data());
      ASSERT_TRUE(read.ok()) << key << ": " << read.ToString();
      bytes_read += ref.size;
    }
    EXPECT_GE(bytes_read, 16u << 20) << "mlp's 16 MiB of weights";
  }
  EXPECT_EQ(chunks.mismatches(), 0u);
  // Both ranges' snapshots hold the same weights: sent once.
  Result<std::vector<std::string>> objects = bucket.List("chunks/");
  ASSERT_TRUE(objects.ok());
  Result<std::string> first = bucket.Get(manifests[0]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(objects->size(), store::ChunksOf(*store::DecodeManifest(*first)).size());
  // The tool lists them, read from the bucket.
  CommandResult listed = ::phos::testing::Run({"/bin/sh", "-c",
                                               "AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \"$0\" bucket-ls "
                                               "--s3-endpoint \"$1\" --s3-bucket \"$2\" mlp",
                                               PHOS_SNAPSHOT_TOOL, s3rver_.endpoint(), kBucket});
  EXPECT_EQ(listed.exit_code, 0) << listed.out;
  for (const std::string& key : manifests) EXPECT_NE(listed.out.find(key + "\t"), std::string::npos) << listed.out;
  // The function serves all along.
  ExpectMlpMatchesReference(CurlPost("/v1/functions/mlp/invoke", R"({"seed": 5})").out, 5, /*full=*/false);
}

// A bucket it cannot reach: phosd does not start, and says why.
TEST(RemoteTierStartTest, PhosdRefusesABucketItCannotReach) {
  CommandResult r = ::phos::testing::Run({"/bin/sh", "-c",
                         "AWS_ACCESS_KEY_ID=a AWS_SECRET_ACCESS_KEY=b \"$0\" --gpu sim --listen 127.0.0.1:0 "
                         "--data-dir \"$(mktemp -d)\" --s3-endpoint http://127.0.0.1:1 --s3-bucket b 2>&1",
                         PHOS_PHOSD});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("the remote tier (--s3-endpoint)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace phos::testing
