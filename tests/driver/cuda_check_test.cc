// CuStatus: a CUresult as a Status with the driver's own error name and string.
#include "phos/driver/cuda_check.h"

#include <gtest/gtest.h>

namespace phos::driver {
namespace {

CUresult FakeName(CUresult r, const char** out) {
  if (r == CUDA_ERROR_OUT_OF_MEMORY) { *out = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS; }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult FakeString(CUresult r, const char** out) {
  if (r == CUDA_ERROR_OUT_OF_MEMORY) { *out = "out of memory"; return CUDA_SUCCESS; }
  return CUDA_ERROR_INVALID_VALUE;
}

TEST(CuStatusTest, CarriesDriverNameAndString) {
  CuErrorText text{&FakeName, &FakeString};
  EXPECT_TRUE(CuStatus(CUDA_SUCCESS, "cuInit(0)", text).ok());
  Status oom = CuStatus(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(&p, n)", text);
  EXPECT_EQ(oom.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(oom.message(), "cuMemAlloc(&p, n): CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  // A code the driver cannot name is still reported, by number.
  Status unknown = CuStatus(static_cast<CUresult>(4242), "cuFoo()", text);
  EXPECT_EQ(unknown.code(), StatusCode::kDeviceError);
  EXPECT_EQ(unknown.message(), "cuFoo(): CUresult 4242");
}

}  // namespace
}  // namespace phos::driver
