// Checkpoint: single-file and sharded Hugging Face directories, and every way an index can point
// at something that is not there or not inside the directory.
#include "phos/fn/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "safetensors_writer.h"

namespace phos::fn {
namespace {

using ::testing::HasSubstr;
using testing::ScratchDir;
using testing::WriteFileBytes;
using testing::WriteSafetensors;

// One F32 tensor per name, of one element each, holding 1, 2, 3, ... in order.
void WriteShard(const std::string& path, const std::vector<std::string>& names, float first_value) {
  std::string header = "{";
  std::string data;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) header += ",";
    header += "\"" + names[i] + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    const float v = first_value + static_cast<float>(i);
    data.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  header += "}";
  WriteSafetensors(path, header, data);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "no scratch directory"; }

  void WriteIndex(const std::string& weight_map) {
    WriteFileBytes(dir_.File("model.safetensors.index.json"),
                   R"({"metadata":{"total_size":16},"weight_map":)" + weight_map + "}");
  }
  void ExpectRefused(StatusCode code, const std::string& what) {
    auto r = Checkpoint::Open(dir_.path());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(what));
  }

  ScratchDir dir_;
};

TEST_F(CheckpointTest, OpensASingleFile) {
  WriteShard(dir_.File("model.safetensors"), {"model.norm.weight", "lm_head.weight"}, 1);
  auto ck = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->TensorNames(), (std::vector<std::string>{"lm_head.weight", "model.norm.weight"}));
  auto v = (*ck)->ReadAsFloat32("lm_head.weight");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::vector<float>{2});
}

TEST_F(CheckpointTest, LooksTensorsUpAcrossShards) {
  WriteShard(dir_.File("model-00001-of-00002.safetensors"), {"a", "b"}, 10);
  WriteShard(dir_.File("model-00002-of-00002.safetensors"), {"c"}, 20);
  WriteIndex(R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
             R"("c":"model-00002-of-00002.safetensors"})");
  auto ck = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->TensorNames(), (std::vector<std::string>{"a", "b", "c"}));
  auto b = (*ck)->ReadAsFloat32("b");
  auto c = (*ck)->ReadAsFloat32("c");
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_EQ(*b, std::vector<float>{11});
  EXPECT_EQ(*c, std::vector<float>{20});
  auto a_file = (*ck)->FileOf("a");
  auto c_file = (*ck)->FileOf("c");
  ASSERT_TRUE(a_file.ok() && c_file.ok());
  EXPECT_THAT((*a_file)->path(), HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT((*c_file)->path(), HasSubstr("model-00002-of-00002.safetensors"));
  auto bytes = (*ck)->Bytes("c");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), 4u);
  auto tensor = (*ck)->Tensor("a");
  ASSERT_TRUE(tensor.ok());
  EXPECT_EQ((*tensor)->name, "a");
}

TEST_F(CheckpointTest, TheIndexWinsOverASingleFile) {
  WriteShard(dir_.File("model.safetensors"), {"stale"}, 1);
  WriteShard(dir_.File("shard.safetensors"), {"fresh"}, 2);
  WriteIndex(R"({"fresh":"shard.safetensors"})");
  auto ck = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ((*ck)->TensorNames(), std::vector<std::string>{"fresh"});
}

TEST_F(CheckpointTest, AMissingTensorIsNotFoundNamingTheDirectory) {
  WriteShard(dir_.File("model.safetensors"), {"a"}, 1);
  auto ck = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  auto r = (*ck)->Tensor("model.layers.0.mlp.up_proj.weight");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("checkpoint '" + dir_.path() + "' has no tensor"));
  EXPECT_FALSE((*ck)->ReadAsFloat32("x").ok());
  EXPECT_FALSE((*ck)->Bytes("x").ok());
}

TEST_F(CheckpointTest, AnEmptyDirectoryIsNotFound) {
  ExpectRefused(StatusCode::kNotFound, "has neither model.safetensors nor model.safetensors.index.json");
}

TEST_F(CheckpointTest, AMissingShardIsNotFound) {
  WriteShard(dir_.File("model-00001-of-00002.safetensors"), {"a"}, 1);
  WriteIndex(R"({"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"})");
  ExpectRefused(StatusCode::kNotFound, "names shard 'model-00002-of-00002.safetensors', which is missing");
}

TEST_F(CheckpointTest, ATensorItsShardLacksIsRefused) {
  WriteShard(dir_.File("shard.safetensors"), {"a"}, 1);
  WriteIndex(R"({"a":"shard.safetensors","b":"shard.safetensors"})");
  ExpectRefused(StatusCode::kCorruption,
                "puts tensor 'b' in shard 'shard.safetensors', which has no such tensor");
}

TEST_F(CheckpointTest, ShardNamesThatEscapeTheDirectoryAreRefused) {
  for (const std::string shard : {"../model.safetensors", "/etc/passwd", "sub/x.safetensors", "..", ""}) {
    SCOPED_TRACE(shard);
    WriteIndex(R"({"a":")" + shard + R"("})");
    ExpectRefused(StatusCode::kInvalidArgument,
                  "shard '" + shard + "' of tensor 'a' is not a file name inside");
  }
}

TEST_F(CheckpointTest, ABrokenIndexIsRefused) {
  WriteIndex("[");
  ExpectRefused(StatusCode::kCorruption, "is not JSON");
  WriteFileBytes(dir_.File("model.safetensors.index.json"), R"({"metadata":{}})");
  ExpectRefused(StatusCode::kCorruption, "has no \"weight_map\" object");
  WriteIndex(R"({"a":3})");
  ExpectRefused(StatusCode::kCorruption, "tensor 'a' maps to something other than a file name");
}

TEST_F(CheckpointTest, ABrokenShardIsRefusedNamingIt) {
  WriteFileBytes(dir_.File("shard.safetensors"), "abc");
  WriteIndex(R"({"a":"shard.safetensors"})");
  ExpectRefused(StatusCode::kCorruption, "shard.safetensors");
}

}  // namespace
}  // namespace phos::fn
