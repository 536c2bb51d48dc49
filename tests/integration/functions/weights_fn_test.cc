// The SDK's DeviceTensor under phosd: a sharded checkpoint with F32, F16 and BF16 tensors,
// uploaded before the pre-entry point, reads back from the device as the values the bit
// patterns written here stand for.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "phosd_fixture.h"
#include "safetensors_writer.h"

namespace phos::testing {
namespace {

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), std::data(values), bytes.size());
  return bytes;
}

class WeightsFnTest : public PhosdTest {
 protected:
  void SetUp() override {
    PhosdTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_FALSE(model_.path().empty()) << "no scratch directory";
    fn::testing::WriteSafetensors(model_.File("a.safetensors"),
                                  R"({"f32":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                                  R"("bf16":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]}})",
                                  Bytes<float>({0.5f, -1.25f, 3.0f}) + Bytes<uint16_t>({0x3F80, 0x7F7F}));
    // 1, -2, the largest F16 and its smallest subnormal.
    fn::testing::WriteSafetensors(model_.File("b.safetensors"),
                                  R"({"f16":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}})",
                                  Bytes<uint16_t>({0x3C00, 0xC000, 0x7BFF, 0x0001}));
    fn::testing::WriteFileBytes(model_.File("model.safetensors.index.json"),
                                R"({"weight_map":{"f32":"a.safetensors","bf16":"a.safetensors",)"
                                R"("f16":"b.safetensors"}})");
  }

  std::string Invoke(const std::string& tensor) {
    CommandResult r = PhosFn({"invoke", "weights", "--data", tensor});
    EXPECT_EQ(r.exit_code, 0) << tensor << ": " << r.out;
    return r.out;
  }

  fn::testing::ScratchDir model_;
};

TEST_F(WeightsFnTest, EveryTensorReadsBackAsFp32FromItsOwnBuffer) {
  CommandResult deploy = PhosFn({"deploy", "weights", PHOS_WEIGHTS_FUNCTION, "--", "--model", model_.path()});
  ASSERT_EQ(deploy.exit_code, 0) << deploy.out;
  EXPECT_EQ(Invoke("f32"), "3 0.5 -1.25 3");
  EXPECT_EQ(Invoke("f16"), "4 1 -2 65504 5.96046448e-08");
  EXPECT_EQ(Invoke("bf16"), "2 1 3.38953139e+38");  // 255 * 2^120, the largest BF16

  CommandResult missing = PhosFn({"invoke", "weights", "--data", "lm_head.weight"});
  EXPECT_NE(missing.exit_code, 0) << missing.out;
  EXPECT_EQ(Invoke("f32"), "3 0.5 -1.25 3");
}

}  // namespace
}  // namespace phos::testing
