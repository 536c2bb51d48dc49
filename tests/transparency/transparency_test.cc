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
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  // On a GPU host (PHOS_TEST_GPU=cuda) the program's own checks are the test: the figures below
  // are the ci profile's.
  const char* gpu = std::getenv("PHOS_TEST_GPU");
  if (gpu != nullptr && std::string(gpu) == "cuda") {
    EXPECT_NE(r.out.find(" 137 attributes each, all "), std::string::npos) << r.out;
    return;
  }
  EXPECT_NE(r.out.find("device report: 2 device(s), 137 attributes each, all "), std::string::npos) << r.out;
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

// stream_report, built like device_report with one translation unit as `--default-stream
// per-thread` builds, runs host functions in stream order across two streams with copies between
// them, holds a stream behind one, asks streams their priority, flags, device and id, and uses the
// default stream from two threads; every value it checks it computed itself.
TEST_F(TransparencyTest, APlainProgramsStreamsHostFunctionsAndPerThreadDefaultStreamsWork) {
  CommandResult r = PhosFn({"run", "--", PHOS_STREAM_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("stream report: host functions 1, 2, 3 in order, all checks held"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per-thread default streams: 2 threads, distinct streams"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  // What it imports, the _ptds / _ptsz entry points included, phos serves.
  CommandResult check = PhosFn({"check", PHOS_STREAM_REPORT});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("\nruns\n"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("served   cudaMemcpy_ptds"), std::string::npos) << check.out;
}

// blas_report, built like device_report against NVIDIA's libcublas too, runs the helpers, Levels
// 1-3 and batched GEMMs with pointer arrays through phos and checks every result with its own loops.
TEST_F(TransparencyTest, APlainCublasProgramsResultsMatchItsOwnLoops) {
  CommandResult r = PhosFn({"run", "--", PHOS_BLAS_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(" checks, all checks held"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
}

// phos-fn check finds every cuBLAS and CUDA runtime function the program imports served.
TEST_F(TransparencyTest, PhosFnCheckSaysTheCublasProgramRuns) {
  CommandResult r = PhosFn({"check", PHOS_BLAS_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\nruns\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  served   cublasSgemmBatched "), std::string::npos) << r.out;
}

// blaslt_report, built like blas_report against NVIDIA's libcublasLt: its matmuls with epilogues
// (bias and GELU in fp32, fp16 and bf16, a strided batch, bias and ReLU) match its own loops.
TEST_F(TransparencyTest, APlainCublasLtProgramsMatmulsMatchItsOwnLoops) {
  CommandResult r = PhosFn({"run", "--", PHOS_BLASLT_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(" checks, all checks held"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
}

// phos-fn check finds every cuBLASLt and CUDA runtime function the program imports served.
TEST_F(TransparencyTest, PhosFnCheckSaysTheCublasLtProgramRuns) {
  CommandResult r = PhosFn({"check", PHOS_BLASLT_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\nruns\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  served   cublasLtMatmul "), std::string::npos) << r.out;
}

// launch_report, built like them but with kernels, compares the runtime's occupancy answers with
// its own, opts a kernel into more dynamic shared memory, launches with launch attributes and
// evaluates a polynomial whose coefficients it sets with cudaMemcpyToSymbol, counting in a
// __device__ variable it reads back. On simgpu (its module embedded in the g++ build) the figures
// are simgpu's kernel attributes (simgpu/README.md, "Kernels") on an A100's limits; on a GPU
// (PHOS_TEST_GPU=cuda, the nvcc build) they are the GPU's, and the program's own checks hold it.
TEST_F(TransparencyTest, APlainProgramsKernelsMatchItsOwnOccupancyAndItsModuleGlobals) {
  const char* gpu = std::getenv("PHOS_TEST_GPU");
  const bool on_gpu = gpu != nullptr && std::string(gpu) == "cuda";
  if (on_gpu && std::string(PHOS_LAUNCH_REPORT_GPU).empty()) GTEST_SKIP() << "built without nvcc";
  const std::string program = on_gpu ? PHOS_LAUNCH_REPORT_GPU : PHOS_LAUNCH_REPORT;
  CommandResult r = PhosFn({"run", "--", program});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all checks held"), std::string::npos) << r.out;
  // What it imports (the launch, occupancy and symbol calls, and nvcc's registration and launch
  // entry points in the GPU build) phos serves.
  CommandResult check = PhosFn({"check", program});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("\nruns\n"), std::string::npos) << check.out;
  if (on_gpu) return;
  EXPECT_NE(r.out.find("attributes: 1024 threads per block, 32 registers, 0 static shared, 64 constant, 0 local "
                       "bytes, PTX 80, binary 80, 49152 dynamic shared bytes, carveout -1\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("occupancy: 32 cases agree; suggested block 1024 (grid 216), by hand 1024\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("launch report: 32 registers, suggested block 1024, 1812 points evaluated"), std::string::npos)
      << r.out;
}

// driver_report, built with g++ against cuda.h and the toolkit's libcuda stub, drives the device
// through the driver API (devices, the primary context and the stack, memory, a module it loads
// with cuModuleLoadData and launches with cuLaunchKernel, streams, events, cuGetProcAddress) and
// checks every result against its own computation. On simgpu its module is the trusted simgpu
// module; on a GPU (PHOS_TEST_GPU=cuda) the fatbin nvcc built from the same kernels.
TEST_F(TransparencyTest, APlainDriverApiProgramsKernelsAndCopiesMatchItsCpu) {
  const char* gpu = std::getenv("PHOS_TEST_GPU");
  const bool on_gpu = gpu != nullptr && std::string(gpu) == "cuda";
  if (on_gpu && std::string(PHOS_DRIVER_MODULE_GPU).empty()) GTEST_SKIP() << "built without nvcc";
  const std::string module = on_gpu ? PHOS_DRIVER_MODULE_GPU : PHOS_DRIVER_MODULE;
  CommandResult r = PhosFn({"run", "--", PHOS_DRIVER_REPORT, module});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernels: 1000 elements of a * x + y + offset, twice, as computed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("driver report: devices, contexts, memory, kernels, streams, entry points, all checks held"),
            std::string::npos)
      << r.out;
  // Every driver function it imports (the _v2 names cuda.h's macros give) phos serves.
  CommandResult check = PhosFn({"check", PHOS_DRIVER_REPORT});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("\nruns\n"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("served   cuMemAlloc_v2"), std::string::npos) << check.out;
}

// entry_point_report, a runtime program, finds driver functions with cudaGetDriverEntryPoint and
// uses memory and the context of either API through the other.
TEST_F(TransparencyTest, DriverApiFunctionsFromCudaGetDriverEntryPointShareTheRuntimesSession) {
  CommandResult r = PhosFn({"run", "--", PHOS_ENTRY_POINT_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entry point report: driver functions through the runtime, one context, all checks held"),
            std::string::npos)
      << r.out;
  CommandResult check = PhosFn({"check", PHOS_ENTRY_POINT_REPORT});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("\nruns\n"), std::string::npos) << check.out;
}

// graph_report, built like launch_report (its kernels by nvcc for a GPU), captures a graph from
// two streams joined by events and replays it 100 times, builds, clones and updates an explicit
// graph, and runs host nodes (explicit and captured) once per launch in graph order, each result
// checked against its own CPU computation; the capture mode's rules hold.
TEST_F(TransparencyTest, APlainProgramsCapturedAndExplicitGraphsMatchItsCpu) {
  const char* gpu = std::getenv("PHOS_TEST_GPU");
  const bool on_gpu = gpu != nullptr && std::string(gpu) == "cuda";
  if (on_gpu && std::string(PHOS_GRAPH_REPORT_GPU).empty()) GTEST_SKIP() << "built without nvcc";
  const std::string program = on_gpu ? PHOS_GRAPH_REPORT_GPU : PHOS_GRAPH_REPORT;
  CommandResult r = PhosFn({"run", "--", program});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("graph report: a captured graph of 6 nodes replayed 100 times, an explicit graph updated, "
                       "host nodes run in graph order, all checks held"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  // Every CUDA function it imports, phos serves.
  CommandResult check = PhosFn({"check", program});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("\nruns\n"), std::string::npos) << check.out;
}

#ifdef PHOS_NCCL_REPORT
// phosd on four simulated devices: nccl_report, built like device_report against NVIDIA's
// libcudart and libnccl, runs as a function declaring four GPUs.
class NcclTransparencyTest : public PhosdTest {
 protected:
  NcclTransparencyTest() { phosd_env_ = {{"PHOS_SIMGPU_DEVICES", "4"}}; }
};

// An all-to-all of sends and receives in one group, ncclAlltoAll, a reduce, an all-reduce and a
// pre-multiplied sum over every device, each checked by the program against its own CPU
// computation; configurations refused and accepted as NCCL does; finalize before destroy.
TEST_F(NcclTransparencyTest, APlainNcclProgramsAllToAllReduceAndAllReduceMatchItsCpu) {
  CommandResult r = PhosFn({"run", "--gpus", "4", "--", PHOS_NCCL_REPORT});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("nccl report: 4 ranks, all-to-all, reduce, all-reduce, pre-multiplied sum, all checks held"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("configurations: 3 refused, 1 accepted"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CHECK FAILED"), std::string::npos) << r.out;
  // Every NCCL and CUDA function it imports, phos serves.
  CommandResult check = PhosFn({"check", PHOS_NCCL_REPORT});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_NE(check.out.find("\nruns\n"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("served   ncclSend"), std::string::npos) << check.out;
}
#endif

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
