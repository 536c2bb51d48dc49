#include "phos/driver/driver_table.h"

#include <gtest/gtest.h>

namespace phos::driver {
namespace {

TEST(DriverTableTest, SimOpensAndCallsThroughTheTable) {
  auto table = DriverTable::Open({.gpu = GpuKind::kSim});
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ((*table)->kind(), GpuKind::kSim);
  ASSERT_EQ((*table)->cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ((*table)->cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_GE(count, 1);
  EXPECT_TRUE((*table)->has_cublas());
  Status s = CuStatus(CUDA_ERROR_INVALID_VALUE, "call", (*table)->error_text());
  EXPECT_NE(s.message().find("CUDA_ERROR_INVALID_VALUE"), std::string::npos);
}

TEST(DriverTableTest, AutoFallsBackToSimWithoutADriver) {
  auto table = DriverTable::Open({.gpu = GpuKind::kAuto, .cuda_library = "libphos-no-such-driver.so.1"});
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ((*table)->kind(), GpuKind::kSim);
}

TEST(DriverTableTest, MissingLibraryIsNamed) {
  auto table = DriverTable::Open({.gpu = GpuKind::kSim, .simgpu_library = "/nonexistent/libphos-simgpu.so"});
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("/nonexistent/libphos-simgpu.so"), std::string::npos) << table.status().message();
}

TEST(DriverTableTest, MissingSymbolIsNamed) {
  // libm is a real library without the driver API: the first entry point it lacks is named.
  auto table = DriverTable::Open({.gpu = GpuKind::kSim, .simgpu_library = "libm.so.6"});
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("has no symbol cuInit"), std::string::npos) << table.status().message();
}

TEST(DriverTableTest, MissingCublasIsNamedUnlessOptional) {
  auto sim = DriverTable::Open({.gpu = GpuKind::kSim});
  ASSERT_TRUE(sim.ok());
  std::string driver = (*sim)->driver_path();
  auto table = DriverTable::Open({.gpu = GpuKind::kCuda, .cuda_library = driver, .cublas_library = "libm.so.6"});
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("libm.so.6 has no symbol cublasCreate_v2"), std::string::npos) << table.status().message();
  table = DriverTable::Open(
      {.gpu = GpuKind::kCuda, .cuda_library = driver, .cublas_library = "libm.so.6", .require_cublas = false});
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_FALSE((*table)->has_cublas());
  EXPECT_EQ((*table)->cublasSgemv, nullptr);
  EXPECT_EQ((*table)->cublasGemmBatchedEx, nullptr);
}

TEST(DriverTableTest, GpuKindParses) {
  EXPECT_EQ(*ParseGpuKind("sim"), GpuKind::kSim);
  EXPECT_EQ(*ParseGpuKind("cuda"), GpuKind::kCuda);
  auto bad = ParseGpuKind("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos);
}

}  // namespace
}  // namespace phos::driver
