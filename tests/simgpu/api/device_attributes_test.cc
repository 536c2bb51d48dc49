// cuDeviceGetAttribute on every profile: every attribute of the CUDA 13 enumeration answers, and
// the figures are the documented ones of the card each profile models. The expected numbers are
// written here from NVIDIA's documents, not read from simgpu's profiles: CUDA C++ Programming
// Guide, "Technical Specifications per Compute Capability" (8.0, 9.0); the A100 and H100
// whitepapers and PCIe product briefs; deviceQuery of the cards.
//
// simgpu is configured once per process, so each profile is checked in a process of its own (a
// death test re-executes this binary); the child prints every mismatch and exits with their count.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <set>
#include <string>

#include "device/profile.h"
#include "phos/simgpu/simgpu.h"

namespace {

constexpr int kDevices = 2;

// One profile's documented figures.
struct Card {
  const char* profile;
  const char* name;  // cuDeviceGetName
  int cc_major, cc_minor;
  int sms;
  int shared_per_sm;  // bytes
  int shared_optin;   // bytes per block with the opt-in
  int l2_bytes;
  int clock_khz;  // boost
  int memory_clock_khz;
  int pci_device_id;  // of the card; vendor 0x10de
  int pci_subsystem_id;
};

// Programming guide, 8.0: 164 KB shared memory per SM, 163 KB per block with the opt-in. A100
// whitepaper: 108 SMs, 40 MB L2. A100 80GB PCIe product brief: 1410 MHz boost, HBM2e at 1512 MHz,
// device id 0x20B5, subsystem 0x1533.
constexpr Card kA100{.profile = "a100-pcie4",
                     .name = "NVIDIA A100 80GB PCIe",
                     .cc_major = 8,
                     .cc_minor = 0,
                     .sms = 108,
                     .shared_per_sm = 164 * 1024,
                     .shared_optin = 163 * 1024,
                     .l2_bytes = 40 * 1024 * 1024,
                     .clock_khz = 1410000,
                     .memory_clock_khz = 1512000,
                     .pci_device_id = 0x20B5,
                     .pci_subsystem_id = 0x1533};
// The ci profile is the A100 with shorter creation costs and its own name.
constexpr Card MakeCi() {
  Card card = kA100;
  card.profile = "ci";
  card.name = "phos simgpu CI device (a100-pcie4 link)";
  return card;
}
constexpr Card kCi = MakeCi();
// Programming guide, 9.0: 228 KB per SM, 227 KB per block with the opt-in. H100 whitepaper: the
// PCIe card has 114 SMs and 50 MB L2. H100 PCIe product brief: 1755 MHz boost, device id 0x2331,
// subsystem 0x1626; HBM2e at 1593 MHz (2.0 TB/s over 5120 bits).
constexpr Card kH100{.profile = "h100-pcie5",
                     .name = "NVIDIA H100 PCIe",
                     .cc_major = 9,
                     .cc_minor = 0,
                     .sms = 114,
                     .shared_per_sm = 228 * 1024,
                     .shared_optin = 227 * 1024,
                     .l2_bytes = 50 * 1024 * 1024,
                     .clock_khz = 1755000,
                     .memory_clock_khz = 1593000,
                     .pci_device_id = 0x2331,
                     .pci_subsystem_id = 0x1626};

void PrintTo(const Card& card, std::ostream* os) {
  *os << card.profile;
}

int g_failures = 0;

void Expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "mismatch: %s\n", what.c_str());
  ++g_failures;
}

int Attr(CUdevice_attribute a, CUdevice dev = 0) {
  int v = -12345;
  CUresult r = cuDeviceGetAttribute(&v, a, dev);
  Expect(r == CUDA_SUCCESS, "attribute " + std::to_string(a) + " answers (got " + std::to_string(r) + ")");
  return v;
}

void ExpectAttr(CUdevice_attribute a, int want, const char* what) {
  const int got = Attr(a);
  Expect(got == want,
         std::string(what) + ": " + std::to_string(got) + ", documented " + std::to_string(want));
}

// Runs in the child: configures simgpu with `card`'s profile and checks everything; returns the
// number of mismatches.
int CheckProfile(const Card& card) {
  PhosSimConfig config{card.profile, 1.0, kDevices, 1ull << 30};
  if (phosSimConfigure(&config) != CUDA_SUCCESS || cuInit(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "simgpu does not start with profile %s\n", card.profile);
    return 100;
  }
  // Every value of the enumeration answers on every device; nothing outside it does.
  for (int dev = 0; dev < kDevices; ++dev) {
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
      int v = 0;
      CUresult r = cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev);
      Expect(r == CUDA_SUCCESS, "device " + std::to_string(dev) + " attribute " + std::to_string(a) +
                                    ": result " + std::to_string(r));
    }
  }
  for (int a : {0, static_cast<int>(CU_DEVICE_ATTRIBUTE_MAX), static_cast<int>(CU_DEVICE_ATTRIBUTE_MAX) + 1,
                -1, 100000}) {
    int v = 0;
    Expect(cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), 0) == CUDA_ERROR_INVALID_VALUE,
           "value " + std::to_string(a) + " outside the enumeration is CUDA_ERROR_INVALID_VALUE");
  }
  int v = 0;
  Expect(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, kDevices) == CUDA_ERROR_INVALID_DEVICE,
         "a device past the count is CUDA_ERROR_INVALID_DEVICE");
  Expect(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0) == CUDA_ERROR_INVALID_VALUE,
         "a null value is CUDA_ERROR_INVALID_VALUE");

  char name[256] = {};
  Expect(cuDeviceGetName(name, sizeof(name), 0) == CUDA_SUCCESS && std::string(name) == card.name,
         std::string("name ") + name);
  ExpectAttr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, card.cc_major, "compute capability major");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, card.cc_minor, "compute capability minor");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, card.sms, "multiprocessors");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, card.shared_per_sm,
             "shared memory per SM");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, card.shared_optin,
             "opt-in shared memory");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, card.l2_bytes, "L2");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, card.clock_khz, "clock");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, card.memory_clock_khz, "memory clock");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120, "memory bus");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, (card.pci_device_id << 16) | 0x10DE,
             "PCI device and vendor id");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, (card.pci_subsystem_id << 16) | 0x10DE,
             "PCI subsystem id");
  // The same for compute capability 8.0 and 9.0 (programming guide).
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024, "shared memory per block");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024, "reserved shared memory per block");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536, "registers per block");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536, "registers per SM");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536, "constant memory");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048, "threads per SM");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32, "blocks per SM");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024, "threads per block");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64, "block z");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647, "grid x");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535, "grid y");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32, "warp");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647, "memory pitch (deviceQuery)");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512, "texture alignment (deviceQuery)");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072, "1D texture");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072, "2D texture width");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536, "2D texture height");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384, "3D texture depth");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048, "2D layered texture layers");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 2046, "cubemap layered layers");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH, 131072, "2D surface width");
  // A100's cudaDeviceProp as NVIDIA's developer forum shows it (thread 275542).
  if (card.cc_major == 8) {
    ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 31457280, "persisting L2");
    ExpectAttr(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632, "access policy window");
  }
  // Capabilities are simgpu's: what it implements reads 1, what it does not reads 0.
  ExpectAttr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1, "unified addressing");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1, "VMM");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1, "host register");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0, "memory pools (no cuMemAllocAsync)");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0, "managed memory (no cuMemAllocManaged)");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0, "cooperative launch (no cuLaunchCooperativeKernel)");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0, "cluster launch (no cuLaunchKernelEx)");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1, "stream priorities");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1, "64-bit stream memory operations");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1, "CU_STREAM_WAIT_VALUE_NOR");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0, "v1 stream memory operations");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, 0, "CU_STREAM_WAIT_VALUE_FLUSH");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0, "mapped host memory");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0, "kernel run time limit");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT, "compute mode");
  ExpectAttr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1, "host NUMA node");

  // Each device its own PCI slot and board; one vendor.
  std::set<int> buses, boards;
  for (int dev = 0; dev < kDevices; ++dev) {
    buses.insert(Attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev));
    boards.insert(Attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID, dev));
  }
  Expect(buses.size() == kDevices, "every device on its own PCI bus");
  Expect(boards.size() == kDevices, "every device its own board group");
  return g_failures;
}

class DeviceAttributesTest : public ::testing::TestWithParam<Card> {};

TEST_P(DeviceAttributesTest, EveryAttributeAnswersWithTheDocumentedFigures) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Card card = GetParam();
  EXPECT_EXIT(std::exit(CheckProfile(card)), ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(Profiles, DeviceAttributesTest, ::testing::Values(kA100, kCi, kH100),
                         [](const ::testing::TestParamInfo<Card>& info) {
                           std::string name = info.param.profile;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// With a watchdog (PHOS_SIMGPU_KERNEL_TIMEOUT) the device says so, as a GPU driving a display does.
TEST(DeviceAttributesWatchdogTest, AWatchdogIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("PHOS_SIMGPU_KERNEL_TIMEOUT", "2", 1);
        setenv("PHOS_SIMGPU_MEMORY", "1G", 1);
        int v = 0;
        const bool reported = cuInit(0) == CUDA_SUCCESS &&
                              cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0) == CUDA_SUCCESS;
        std::fprintf(stderr, "attribute %d\n", v);
        std::exit(reported && v == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "attribute 1");
}

TEST(DeviceAttributesProfilesTest, EveryProfileOfSimgpuHasItsDocumentedFiguresHere) {
  // A profile added to simgpu without a Card above would go unchecked.
  std::set<std::string> checked;
  for (const Card& card : {kA100, kCi, kH100}) checked.insert(card.profile);
  for (const phos::sim::DeviceProfile* profile : phos::sim::AllProfiles()) {
    EXPECT_EQ(checked.count(std::string(profile->name)), 1u) << profile->name;
  }
}

}  // namespace
