// Devices: enumeration, identity and the attributes phos reads when it sizes pools and launches.
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "conformance.h"

namespace phos::conformance {
namespace {

class DeviceTest : public DriverTest {
 protected:
  int Attribute(CUdevice_attribute attribute) {
    int value = -1;
    EXPECT_EQ(cuDeviceGetAttribute(&value, attribute, device_), CUDA_SUCCESS) << attribute;
    return value;
  }
};

TEST_F(DeviceTest, CountIsPositiveAndEveryOrdinalHasAHandle) {
  int count = 0;
  PHOS_ASSERT_CU(cuDeviceGetCount(&count));
  ASSERT_GE(count, 1);
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = -1;
    PHOS_EXPECT_CU(cuDeviceGet(&device, ordinal));
    EXPECT_GE(device, 0);
  }
}

TEST_F(DeviceTest, NameIsNonEmptyAndTerminated) {
  char name[256];
  std::memset(name, 'x', sizeof(name));
  PHOS_ASSERT_CU(cuDeviceGetName(name, sizeof(name), device_));
  const std::size_t length = strnlen(name, sizeof(name));
  EXPECT_GT(length, 0u);
  EXPECT_LT(length, sizeof(name));
}

TEST_F(DeviceTest, UuidIsDistinctPerDevice) {
  int count = 0;
  PHOS_ASSERT_CU(cuDeviceGetCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two devices; this host has " << count;
  std::set<std::string> uuids;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device;
    PHOS_ASSERT_CU(cuDeviceGet(&device, ordinal));
    CUuuid uuid;
    PHOS_ASSERT_CU(cuDeviceGetUuid(&uuid, device));
    uuids.insert(std::string(uuid.bytes, sizeof(uuid.bytes)));
  }
  EXPECT_EQ(uuids.size(), static_cast<std::size_t>(count));
}

TEST_F(DeviceTest, UuidIsStable) {
  CUuuid first;
  CUuuid second;
  PHOS_ASSERT_CU(cuDeviceGetUuid(&first, device_));
  PHOS_ASSERT_CU(cuDeviceGetUuid(&second, device_));
  EXPECT_EQ(std::memcmp(first.bytes, second.bytes, sizeof(first.bytes)), 0);
}

TEST_F(DeviceTest, TotalMemoryAgreesWithMemGetInfo) {
  std::size_t device_total = 0;
  PHOS_ASSERT_CU(cuDeviceTotalMem(&device_total, device_));
  EXPECT_GE(device_total, 1 * kGiB);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_bytes, &total));
  // cuMemGetInfo's total is what the context may use: at most the device's memory, and not much
  // less (drivers hold back a few hundred MiB at most).
  EXPECT_LE(total, device_total);
  EXPECT_GE(total, device_total / 10 * 9);
  EXPECT_LE(free_bytes, total);
  EXPECT_GT(free_bytes, 0u);
}

TEST_F(DeviceTest, ComputeCapabilityIsVoltaOrNewer) {
  const int major = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  // The VMM API and the kernels' sm_80/sm_90 builds need Volta or newer.
  EXPECT_GE(major, 7);
  EXPECT_GE(minor, 0);
  EXPECT_LE(minor, 9);
}

TEST_F(DeviceTest, ExecutionLimits) {
  EXPECT_GT(Attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 0);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  // 1024 on every GPU since Fermi; module_test relies on 2048 being over the limit.
  const int max_threads = Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  EXPECT_GE(max_threads, 1024);
  EXPECT_LT(max_threads, 2048);
  EXPECT_GE(Attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), 1024);
  EXPECT_GE(Attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z), 64);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), 2147483647);
  EXPECT_GE(Attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y), 65535);
}

TEST_F(DeviceTest, AddressingAndVmmSupport) {
  // phos hands out device pointers that must not collide with host pointers (UVA) and restores
  // buffers at fixed addresses (VMM, docs/design.md D5).
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 1);
}

TEST_F(DeviceTest, AtLeastTwoCopyEngines) {
  // One engine per direction lets restore traffic (H2D) overlap checkpoint traffic (D2H).
  EXPECT_GE(Attribute(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT), 2);
}

TEST_F(DeviceTest, DriverVersionIsAtLeast12_4) {
  int version = 0;
  PHOS_ASSERT_CU(cuDriverGetVersion(&version));
  EXPECT_GE(version, 12040);
}

TEST_F(DeviceTest, InvalidOrdinalIsInvalidDevice) {
  int count = 0;
  PHOS_ASSERT_CU(cuDeviceGetCount(&count));
  CUdevice device;
  EXPECT_EQ(cuDeviceGet(&device, count), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(&device, -1), CUDA_ERROR_INVALID_DEVICE);
  int value = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, count), CUDA_ERROR_INVALID_DEVICE);
  std::size_t bytes = 0;
  EXPECT_EQ(cuDeviceTotalMem(&bytes, count), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(DeviceTest, UnknownAttributeIsInvalidValue) {
  int value = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, device_), CUDA_ERROR_INVALID_VALUE);
}

// Before cuInit every driver call but a few (version, error strings) is CUDA_ERROR_NOT_INITIALIZED
// (cuInit reference). This process has called cuInit in other tests, so the check runs in a fresh
// one: the "threadsafe" death-test style re-executes the test binary instead of forking it.
TEST(DeviceDeathTest, CallsBeforeCuInitAreNotInitialized) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int failures = 0;
        int count = -1;
        if (cuDeviceGetCount(&count) != CUDA_ERROR_NOT_INITIALIZED) failures |= 1;
        CUdevice device;
        if (cuDeviceGet(&device, 0) != CUDA_ERROR_NOT_INITIALIZED) failures |= 2;
        int version = 0;
        if (cuDriverGetVersion(&version) != CUDA_SUCCESS || version <= 0) failures |= 4;
        std::exit(failures);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace phos::conformance
