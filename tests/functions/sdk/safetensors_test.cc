// SafetensorsFile: a round trip of a file written here, then each way a file can be broken,
// each asserting that the error names the problem.
#include "phos/fn/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "safetensors_writer.h"

namespace phos::fn {
namespace {

using ::testing::HasSubstr;
using testing::SafetensorsBytes;
using testing::ScratchDir;
using testing::WriteFileBytes;
using testing::WriteSafetensors;

std::string Floats(std::initializer_list<float> values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), std::data(values), bytes.size());
  return bytes;
}

std::string U16s(std::initializer_list<uint16_t> values) {
  std::string bytes(values.size() * sizeof(uint16_t), '\0');
  std::memcpy(bytes.data(), std::data(values), bytes.size());
  return bytes;
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "no scratch directory"; }

  // Opens a file made of `header` and `data`.
  Result<std::unique_ptr<SafetensorsFile>> OpenWith(std::string_view header, std::string_view data = "") {
    WriteSafetensors(path_, header, data);
    return SafetensorsFile::Open(path_);
  }
  Result<std::unique_ptr<SafetensorsFile>> OpenBytes(std::string_view bytes) {
    WriteFileBytes(path_, bytes);
    return SafetensorsFile::Open(path_);
  }
  // Expects opening to fail with `code` and a message holding `what`.
  void ExpectRefused(const Result<std::unique_ptr<SafetensorsFile>>& r, StatusCode code,
                     const std::string& what) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(what));
    EXPECT_THAT(r.status().message(), HasSubstr(path_));
  }

  ScratchDir dir_;
  std::string path_ = dir_.File("t.safetensors");
};

TEST_F(SafetensorsFileTest, RoundTripsEveryDtypeAndTheMetadata) {
  const std::string header = R"({"__metadata__":{"format":"pt","note":"x"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"F16","shape":[2],"data_offsets":[24,28]},)"
                             R"("c":{"dtype":"BF16","shape":[1,2],"data_offsets":[28,32]},)"
                             R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[32,32]}}  )";
  const std::string data = Floats({0, 1, 2, 3, 4, 5}) + U16s({0x3C00, 0xC000}) + U16s({0x3F80, 0x4040});
  auto file = OpenWith(header, data);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const SafetensorsFile& f = **file;

  EXPECT_EQ(f.TensorNames(), (std::vector<std::string>{"a", "b", "c", "empty"}));
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(f.Contains("b"));
  EXPECT_FALSE(f.Contains("__metadata__"));

  auto a = f.Tensor("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->dtype, Dtype::kF32);
  EXPECT_EQ((*a)->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ((*a)->element_count(), 6u);
  auto a_bytes = f.Bytes("a");
  ASSERT_TRUE(a_bytes.ok());
  ASSERT_EQ(a_bytes->size(), 24u);
  EXPECT_EQ(std::memcmp(a_bytes->data(), data.data(), 24), 0);

  auto a_floats = f.ReadAsFloat32("a");
  ASSERT_TRUE(a_floats.ok());
  EXPECT_EQ(*a_floats, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  auto b_floats = f.ReadAsFloat32("b");
  ASSERT_TRUE(b_floats.ok());
  EXPECT_EQ(*b_floats, (std::vector<float>{1.0f, -2.0f}));
  auto c_floats = f.ReadAsFloat32("c");
  ASSERT_TRUE(c_floats.ok());
  EXPECT_EQ(*c_floats, (std::vector<float>{1.0f, 3.0f}));
  auto empty = f.ReadAsFloat32("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(SafetensorsFileTest, AMissingTensorIsNotFoundNamingTheFile) {
  auto file = OpenWith(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", Floats({1}));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto missing = (*file)->Tensor("model.norm.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'model.norm.weight'"));
  EXPECT_THAT(missing.status().message(), HasSubstr(path_));
  EXPECT_FALSE((*file)->ReadAsFloat32("zz").ok());
}

TEST_F(SafetensorsFileTest, AMissingFileIsAnIoError) {
  auto r = SafetensorsFile::Open(dir_.File("absent.safetensors"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_THAT(r.status().message(), HasSubstr("absent.safetensors"));
}

TEST_F(SafetensorsFileTest, ADirectoryIsRefused) {
  auto r = SafetensorsFile::Open(dir_.path());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsFileTest, AFileShorterThanTheHeaderLengthIsTruncated) {
  ExpectRefused(OpenBytes(""), StatusCode::kCorruption, "shorter than the 8-byte header length");
  ExpectRefused(OpenBytes(std::string_view("\x02\x00\x00", 3)), StatusCode::kCorruption,
                "truncated: 3 bytes");
}

TEST_F(SafetensorsFileTest, AHeaderLongerThanTheFileIsTruncated) {
  ExpectRefused(OpenBytes(SafetensorsBytes("{}", "", 100)), StatusCode::kCorruption,
                "truncated: header length 100 but only 2 bytes follow it");
}

TEST_F(SafetensorsFileTest, AnAbsurdHeaderLengthIsRefused) {
  ExpectRefused(OpenBytes(SafetensorsBytes("{}", "", 200ull << 20)), StatusCode::kCorruption,
                "header length 209715200 exceeds the 104857600-byte limit");
  ExpectRefused(OpenBytes(SafetensorsBytes("{}", "", ~0ull)), StatusCode::kCorruption, "exceeds");
}

TEST_F(SafetensorsFileTest, AHeaderThatIsNotJsonIsRefused) {
  ExpectRefused(OpenWith(R"({"a": {"dtype": )"), StatusCode::kCorruption, "header is not JSON");
  ExpectRefused(OpenWith(std::string("\0\0\0\0", 4)), StatusCode::kCorruption, "header is not JSON");
}

TEST_F(SafetensorsFileTest, AHeaderThatIsNotAnObjectIsRefused) {
  ExpectRefused(OpenWith("[1, 2]"), StatusCode::kCorruption, "header is not a JSON object");
  ExpectRefused(OpenWith("\"a\""), StatusCode::kCorruption, "header is not a JSON object");
}

TEST_F(SafetensorsFileTest, AnEntryMissingAFieldIsRefused) {
  ExpectRefused(OpenWith(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", Floats({1})), StatusCode::kCorruption,
                "tensor 'w': missing \"dtype\"");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", Floats({1})),
                StatusCode::kCorruption, "tensor 'w': missing \"shape\"");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[1]}})", Floats({1})), StatusCode::kCorruption,
                "tensor 'w': missing \"data_offsets\"");
}

TEST_F(SafetensorsFileTest, FieldsOfTheWrongTypeAreRefused) {
  ExpectRefused(OpenWith(R"({"w":3})"), StatusCode::kCorruption, "tensor 'w': entry is not an object");
  ExpectRefused(OpenWith(R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", Floats({1})),
                StatusCode::kCorruption, "\"dtype\" is not a string");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", Floats({1})),
                StatusCode::kCorruption, "\"shape\" is not an array");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", Floats({1})),
                StatusCode::kCorruption, "a \"shape\" dimension is not a number");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", Floats({1})),
                StatusCode::kCorruption, "\"data_offsets\" is not an array [begin, end]");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", Floats({1})),
                StatusCode::kCorruption, "\"data_offsets\" end is not a number");
  ExpectRefused(OpenWith(R"({"__metadata__":{"k":1}})"), StatusCode::kCorruption,
                "\"__metadata__\" entry 'k' is not a string");
  ExpectRefused(OpenWith(R"({"__metadata__":[]})"), StatusCode::kCorruption,
                "\"__metadata__\" is not an object");
}

TEST_F(SafetensorsFileTest, AnUnsupportedDtypeIsRefusedNamingTensorAndDtype) {
  ExpectRefused(OpenWith(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", "12345678"),
                StatusCode::kNotSupported, "tensor 'ids' has dtype 'I64'");
  ExpectRefused(OpenWith(R"({"q":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "1"),
                StatusCode::kNotSupported, "tensor 'q' has dtype 'F8_E4M3'");
}

TEST_F(SafetensorsFileTest, NegativeAndFractionalDimensionsAreRefused) {
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,0]}})"),
                StatusCode::kCorruption, "tensor 'w': a \"shape\" dimension is negative (-1)");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,10]}})"),
                StatusCode::kCorruption, "is not an integer");
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})"),
                StatusCode::kCorruption, "\"data_offsets\" begin is negative");
}

TEST_F(SafetensorsFileTest, AnOverflowingShapeProductIsRefused) {
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F16","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                StatusCode::kCorruption, "overflows 64 bits");
  // 2^62 elements fit in 64 bits, 2^62 F32 elements' bytes do not.
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
                StatusCode::kCorruption, "overflows 64 bits");
}

TEST_F(SafetensorsFileTest, ASizeThatDisagreesWithTheShapeIsRefused) {
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", Floats({1, 2})),
                StatusCode::kCorruption,
                "tensor 'w': data_offsets span 8 bytes but shape [3] of F32 needs 12");
}

TEST_F(SafetensorsFileTest, BeginAfterEndIsRefused) {
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", Floats({1, 2, 3})),
                StatusCode::kCorruption, "tensor 'w': data_offsets begin 8 > end 4");
}

TEST_F(SafetensorsFileTest, OffsetsPastTheDataAreaAreTruncated) {
  ExpectRefused(OpenWith(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", Floats({1})),
                StatusCode::kCorruption,
                "truncated: tensor 'w' ends at data byte 8 but the data area has 4 bytes");
}

TEST_F(SafetensorsFileTest, OverlappingTensorsAreRefused) {
  ExpectRefused(OpenWith(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         Floats({1, 2, 3})),
                StatusCode::kCorruption, "tensors 'a' and 'b' overlap");
}

TEST_F(SafetensorsFileTest, DuplicateTensorNamesAreRefused) {
  ExpectRefused(OpenWith(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         Floats({1, 2})),
                StatusCode::kCorruption, "header names 'a' more than once");
}

TEST_F(SafetensorsFileTest, FieldNamesSharedByEntriesAreNotDuplicates) {
  // Only top-level keys are tensor names: every entry repeating "dtype" and "shape" is fine.
  auto file = OpenWith(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       Floats({1, 2}));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->TensorNames().size(), 2u);
}

TEST_F(SafetensorsFileTest, CorruptedAndTruncatedCopiesOfAGoodFileNeverEscapeTheFile) {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"F16","shape":[2],"data_offsets":[24,28]}})";
  const std::string good =
      SafetensorsBytes(header, Floats({0, 1, 2, 3, 4, 5}) + U16s({0x3C00, 0xC000}), header.size());
  std::mt19937 rng(11);  // fixed: the same copies every run
  int opened = 0;
  for (int i = 0; i < 500; ++i) {
    std::string bytes = good;
    if (i % 5 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      for (int flips = 0; flips < 1 + i % 3; ++flips) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    auto file = OpenBytes(bytes);
    if (!file.ok()) continue;
    ++opened;
    // Whatever was accepted lies inside the file and converts without reading past it.
    uint64_t tensor_bytes = 0;
    for (const std::string& name : (*file)->TensorNames()) {
      auto values = (*file)->ReadAsFloat32(name);
      ASSERT_TRUE(values.ok()) << values.status().ToString();
      tensor_bytes += (*(*file)->Tensor(name))->byte_size();
    }
    EXPECT_LE(tensor_bytes, bytes.size());
  }
  EXPECT_GT(opened, 0);  // flips inside the data area leave the header valid
}

}  // namespace
}  // namespace phos::fn
