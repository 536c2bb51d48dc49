// Shared pieces of the CUDA conformance suite (docs/design.md D3). Everything here uses only the public
// driver API of <cuda.h>, so the same sources run against simgpu and against NVIDIA's driver.
#pragma once

#include <cuda.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

// gtest finds this by argument-dependent lookup (CUresult is a global enum), so failed
// comparisons print "CUDA_ERROR_INVALID_VALUE (1)" rather than a bare number.
void PrintTo(CUresult result, std::ostream* os);

#define PHOS_ASSERT_CU(expr) ASSERT_EQ((expr), CUDA_SUCCESS) << #expr
#define PHOS_EXPECT_CU(expr) EXPECT_EQ((expr), CUDA_SUCCESS) << #expr

namespace phos::conformance {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kMiB = 1024 * kKiB;
inline constexpr std::size_t kGiB = 1024 * kMiB;

// A copy this long keeps the device busy for ~100 ms on simgpu's ci profile at time scale 10
// (25 GB/s pinned H2D) and ~10 ms on an A100 over PCIe 4.0: either is orders of magnitude longer
// than the few microseconds between enqueuing it and the host's next API call.
inline constexpr std::size_t kLongCopyBytes = 256 * kMiB;

// cuInit(0), device 0, and a fresh context made current to the test's thread; the context is
// destroyed (with everything allocated in it) after the test.
class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

// Device memory from cuMemAlloc, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  CUresult Allocate(std::size_t bytes);
  CUdeviceptr get() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

// Page-locked host memory from cuMemHostAlloc, freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  CUresult Allocate(std::size_t bytes);
  void* get() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  CUresult Create(unsigned int flags);
  CUstream get() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  CUresult Create(unsigned int flags);
  CUevent get() const { return event_; }

 private:
  CUevent event_ = nullptr;
};

// A pinned host-to-device copy of kLongCopyBytes: keeps a stream busy for a while.
class LongCopy {
 public:
  CUresult Allocate();
  CUresult Enqueue(CUstream stream) {
    return cuMemcpyHtoDAsync(device_.get(), host_.get(), kLongCopyBytes, stream);
  }
  CUdeviceptr destination() const { return device_.get(); }
  void* source() const { return host_.get(); }

 private:
  PinnedBuffer host_;
  DeviceBuffer device_;
};

// A virtual address range from cuMemAddressReserve, freed on destruction (mappings inside it
// must be gone by then).
class AddressRange {
 public:
  AddressRange() = default;
  AddressRange(const AddressRange&) = delete;
  AddressRange& operator=(const AddressRange&) = delete;
  ~AddressRange();

  CUresult Reserve(std::size_t bytes, CUdeviceptr requested_address);
  // Gives the range back now; the destructor then has nothing to do.
  CUresult Free();
  CUdeviceptr get() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

// Pinned device memory on `device`, the only kind phos creates through cuMemCreate.
CUmemAllocationProp DeviceAllocationProp(CUdevice device);
CUresult MinimumGranularity(CUdevice device, std::size_t* granularity);
// cuMemMap then cuMemSetAccess(read-write for `device`): what makes a VMM range usable.
CUresult MapReadWrite(CUdeviceptr ptr, std::size_t bytes, CUmemGenericAllocationHandle handle,
                      CUdevice device);

// Host wall-clock time, for what the host observes (blocking calls, overlap).
class WallTimer {
 public:
  WallTimer() : start_(std::chrono::steady_clock::now()) {}
  double ElapsedMs() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Device time between two events recorded on a stream (cuEventElapsedTime): what the device
// reports, modelled time on simgpu.
class EventTimer {
 public:
  CUresult Create();
  CUresult Start(CUstream stream) { return cuEventRecord(start_.get(), stream); }
  CUresult Stop(CUstream stream) { return cuEventRecord(stop_.get(), stream); }
  // Waits for the stop event, then returns the elapsed milliseconds in *ms.
  CUresult ElapsedMs(float* ms);

 private:
  Event start_;
  Event stop_;
};

// The conformance kernels (kernels/*.cuh), built by phos_add_kernel_module as a simgpu module or
// a fatbin, loaded from the file's bytes with cuModuleLoadData as phosd loads a function's modules.
class KernelModule {
 public:
  KernelModule() = default;
  KernelModule(const KernelModule&) = delete;
  KernelModule& operator=(const KernelModule&) = delete;
  ~KernelModule();

  // False when this build has no kernel module (see CMakeLists.txt); tests then skip.
  static bool Available();
  // Reads the module file; an unreadable file is CUDA_ERROR_FILE_NOT_FOUND.
  CUresult Load();
  CUresult Unload();
  CUresult Function(const char* mangled_name, CUfunction* function) const;
  CUmodule get() const { return module_; }

 private:
  CUmodule module_ = nullptr;
};

// Reads a whole file into 8-byte-aligned storage (fatbin images must be aligned); false if the
// file cannot be read.
bool ReadFileBytes(const std::string& path, std::vector<std::uint64_t>* words, std::size_t* bytes);

// A position-dependent 32-bit pattern, so that misplaced or stale bytes do not compare equal.
void FillPattern(void* data, std::size_t bytes, std::uint32_t seed);
// Index of the first byte that differs from the pattern, or bytes if all match.
std::size_t FirstPatternMismatch(const void* data, std::size_t bytes, std::uint32_t seed);
std::uint8_t PatternByte(std::size_t index, std::uint32_t seed);

// Smallest of `repetitions` wall-clock measurements of `body` (which returns a CUresult); the
// minimum filters out the scheduling noise of a loaded machine. Stops at the first error.
template <typename Body>
CUresult MinWallMs(int repetitions, Body body, double* min_ms) {
  *min_ms = 0;
  for (int i = 0; i < repetitions; ++i) {
    WallTimer timer;
    if (CUresult r = body(); r != CUDA_SUCCESS) return r;
    const double ms = timer.ElapsedMs();
    if (i == 0 || ms < *min_ms) *min_ms = ms;
  }
  return CUDA_SUCCESS;
}

}  // namespace phos::conformance
