// device_report, a program that knows nothing of phos, runs under `phos-fn run` and finds the device
// it expects: every attribute answers, every property agrees with its attribute and with the limits
// the programming guide gives for its compute capability (the program checks that itself), and
// the figures are those NVIDIA documents for the A100 80GB PCIe the ci profile models.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "../integration/phosd_fixture.h"

namespace phos::testing {
namespace {

class TransparencyTest : public PhosdTest {};

TEST_F(TransparencyTest, APlainProgramSeesEveryAttributeAndPropertyOfTheDevice) {
  CommandResult r = PhosFn({"run", "--", PHOS_DEVICE_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("device report: 2 device(s), 137 attributes each, all "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  // CUDA C++ Programming Guide (compute capability 8.0), A100 whitepaper, A100 80GB PCIe brief.
  for (const char* line :
       {"  cudaDevAttrComputeCapabilityMajor = 8\n", "  cudaDevAttrMultiProcessorCount = 108\n",
        "  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 167936\n",
        "  cudaDevAttrMaxSharedMemoryPerBlockOptin = 166912\n",
        "  cudaDevAttrMaxSharedMemoryPerBlock = 49152\n", "  cudaDevAttrL2CacheSize = 41943040\n",
        "  cudaDevAttrClockRate = 1410000\n", "  prop.regsPerBlock = 65536\n",
        "  prop.totalConstMem = 65536\n", "  prop.gpuPciDeviceID = 548737246\n",
        "  prop.name = \"phos simgpu CI device (a100-pcie4 link)\"\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing: " << line;
  }
}

// memory_report, built like device_report, moves rows between pitched device memory and host
// memory, sets a block, stages it through a stream-ordered allocation and checks every byte
// against its own host image.
TEST_F(TransparencyTest, APlainProgramsPitchedCopiesAndStreamOrderedAllocationsMatchItsHostImage) {
  CommandResult r = PhosFn({"run", "--", PHOS_MEMORY_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("memory report: pitch 1024, all checks held"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
}

// launch_report, built like them but with kernels (a simgpu module embedded for this run),
// compares the runtime's occupancy answers with its own, opts a kernel into more dynamic shared
// memory, launches with launch attributes and evaluates a polynomial whose coefficients it sets
// with cudaMemcpyToSymbol, counting in a __device__ variable it reads back. The figures are
// simgpu's kernel attributes (simgpu/README.md, "Kernels") on an A100's limits.
TEST_F(TransparencyTest, APlainProgramsKernelsReportTheirAttributesOccupancyAndModuleGlobals) {
  CommandResult r = PhosFn({"run", "--", PHOS_LAUNCH_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attributes: 1024 threads per block, 32 registers, 0 static shared, 64 constant, 0 local bytes, "
                       "PTX 80, binary 80, 49152 dynamic shared bytes, carveout -1\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("occupancy: 32 cases agree; suggested block 1024 (grid 216), by hand 1024\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("launch report: 32 registers, suggested block 1024, 1812 points evaluated, all checks held"),
            std::string::npos)
      << r.out;
}

// `phos-fn check` reads the program's imports (the launch, occupancy and symbol calls among them)
// and finds every one served.
TEST_F(TransparencyTest, PhosFnCheckSaysTheLaunchReportRuns) {
  CommandResult r = PhosFn({"check", PHOS_LAUNCH_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("runs"), std::string::npos) << r.out;
}

// The nvcc-built launch_report on NVIDIA's driver: run by the `gpu` label's test
// (transparency_gpu.launch_report) on a GPU host, skipped elsewhere. Its figures are the GPU's,
// so the program's own checks are what holds it.
class GpuTransparencyTest : public PhosdTest {
 protected:
  void SetUp() override {
    if (std::getenv("PHOS_TRANSPARENCY_ON_GPU") == nullptr || std::string(PHOS_LAUNCH_REPORT_GPU).empty()) {
      GTEST_SKIP() << "needs a GPU (ctest -L gpu) and a build with nvcc";
    }
    PhosdTest::SetUp();
  }
  std::string GpuKind() const override { return "cuda"; }
};

TEST_F(GpuTransparencyTest, TheNvccBuiltLaunchReportHoldsOnTheGpu) {
  CommandResult r = PhosFn({"run", "--", PHOS_LAUNCH_REPORT_GPU});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all checks held"), std::string::npos) << r.out;
}

// phosd on the h100-pcie5 profile (its contexts cost what an H100's do: a few seconds).
class H100TransparencyTest : public PhosdTest {
 protected:
  H100TransparencyTest() { phosd_env_ = {{"PHOS_SIMGPU_PROFILE", "h100-pcie5"}}; }
};

TEST_F(H100TransparencyTest, OnTheH100ProfileTheProgramSeesAnH100) {
  CommandResult r = PhosFn({"run", "--", PHOS_DEVICE_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  // Programming guide (compute capability 9.0), H100 whitepaper, H100 PCIe product brief.
  for (const char* line :
       {"  prop.name = \"NVIDIA H100 PCIe\"\n", "  cudaDevAttrComputeCapabilityMajor = 9\n",
        "  cudaDevAttrMultiProcessorCount = 114\n",
        "  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 233472\n",
        "  cudaDevAttrMaxSharedMemoryPerBlockOptin = 232448\n", "  cudaDevAttrL2CacheSize = 52428800\n",
        "  prop.gpuPciDeviceID = 590418142\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing: " << line;
  }
}

TEST_F(TransparencyTest, WithoutPhosdTheProgramFindsNoDevice) {
  // With NVIDIA's library and no GPU the program fails: what it printed under phosd came from phos.
  CommandResult r = ::phos::testing::Run({PHOS_DEVICE_REPORT});
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA driver is present on this host";
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace phos::testing
