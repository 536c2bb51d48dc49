// Helpers shared by the simgpu module tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "module/module.h"

namespace phos::sim::testing {

inline std::vector<unsigned char> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Bytes placed at the very end of a readable mapping, followed by at least `guard_bytes` (and
// at least a page) of inaccessible memory: reading past them faults, as reading past a truncated
// image at the end of its mapping would. A truncated image's headers may point anywhere in the
// whole image: a guard as long as the whole image makes each of those reads fault, whatever is
// mapped after the guard.
class GuardedBytes {
 public:
  explicit GuardedBytes(const std::vector<unsigned char>& bytes, size_t guard_bytes = 0) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    readable_ = (bytes.size() + page - 1) / page * page;
    if (readable_ == 0) readable_ = page;
    const size_t guard = std::max(page, (guard_bytes + page - 1) / page * page);
    length_ = readable_ + guard;
    base_ = static_cast<unsigned char*>(
        mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      ADD_FAILURE() << "mmap failed";
      return;
    }
    mprotect(base_ + readable_, guard, PROT_NONE);
    data_ = base_ + readable_ - bytes.size();
    if (!bytes.empty()) std::memcpy(data_, bytes.data(), bytes.size());
  }
  ~GuardedBytes() {
    if (base_ != nullptr) munmap(base_, length_);
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;

  const void* data() const { return data_; }

 private:
  unsigned char* base_ = nullptr;
  unsigned char* data_ = nullptr;
  size_t readable_ = 0;
  size_t length_ = 0;
};

// Loads a module file; fails the test on error.
inline std::shared_ptr<Module> LoadModuleFile(const char* path) {
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile(path, &module), CUDA_SUCCESS) << path;
  return module;
}

inline const Kernel* GetKernel(const Module& module, const char* name) {
  const Kernel* kernel = nullptr;
  EXPECT_EQ(module.GetFunction(name, &kernel), CUDA_SUCCESS) << name;
  return kernel;
}

inline LaunchGeometry Geometry(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  return LaunchGeometry{{gx, gy, gz}, {bx, by, bz}};
}

// Captures kernelParams and runs the whole grid on the calling thread.
inline void Launch(const Kernel& kernel, const LaunchGeometry& geometry, std::vector<void*> params) {
  ASSERT_EQ(CheckLaunchGeometry(geometry), CUDA_SUCCESS);
  KernelArgs args;
  ASSERT_EQ(kernel.CaptureArgs(params.empty() ? nullptr : params.data(), nullptr, &args), CUDA_SUCCESS);
  kernel.RunBlocks(geometry, args.pointers(), 0, kernel.block_count(geometry));
}

}  // namespace phos::sim::testing
