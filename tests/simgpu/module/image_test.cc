// What the loader refuses, and that refusing never crashes: garbage, truncated and corrupt images,
// shared objects that are not simgpu modules, and the nvcc fatbin of the same kernels.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <math.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "module/elf_image.h"
#include "module/module.h"
#include "test_support.h"

namespace phos::sim {
namespace {

using testing::GuardedBytes;
using testing::ReadFileBytes;

CUresult LoadGuarded(const std::vector<unsigned char>& bytes, size_t guard_bytes = 0) {
  GuardedBytes guarded(bytes, guard_bytes);
  std::shared_ptr<Module> module;
  const CUresult result = Module::Load(guarded.data(), &module);
  EXPECT_EQ(module == nullptr, result != CUDA_SUCCESS);
  return result;
}

std::string TempPath(const char* name) {
  return ::testing::TempDir() + "/" + name + "." + std::to_string(getpid());
}

void WriteFile(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string LibmPath() {
  Dl_info info{};
  EXPECT_NE(dladdr(reinterpret_cast<void*>(&cosf), &info), 0);
  return info.dli_fname != nullptr ? info.dli_fname : "";
}

TEST(SimModuleImageTest, NullArgumentsAreInvalidValue) {
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::Load(nullptr, &module), CUDA_ERROR_INVALID_VALUE);
  const std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  EXPECT_EQ(Module::Load(bytes.data(), nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Module::LoadFile(nullptr, &module), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Module::LoadFile(PHOS_TEST_MODULE, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimModuleImageTest, GarbageIsInvalidImage) {
  std::mt19937 rng(7);
  std::vector<unsigned char> garbage(4096);
  for (unsigned char& b : garbage) b = static_cast<unsigned char>(rng());
  EXPECT_EQ(LoadGuarded(garbage), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(LoadGuarded(std::vector<unsigned char>(4096, 0)), CUDA_ERROR_INVALID_IMAGE);
  // Three bytes before unmapped memory: not even an ELF header's worth is readable.
  EXPECT_EQ(LoadGuarded({0x7f, 'E', 'L'}), CUDA_ERROR_INVALID_IMAGE);
}

TEST(SimModuleImageTest, TruncatedImageIsInvalidImage) {
  const std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  ASSERT_GT(bytes.size(), 4096u);
  for (size_t keep : {size_t{16}, sizeof(Elf64_Ehdr), size_t{1000}, bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(keep);
    EXPECT_EQ(LoadGuarded(std::vector<unsigned char>(bytes.begin(), bytes.begin() + keep), bytes.size()),
              CUDA_ERROR_INVALID_IMAGE);
  }
  EXPECT_EQ(LoadGuarded(bytes), CUDA_SUCCESS);  // the same placement, whole
}

// An image received with its size (phosSimModuleLoadDataSized): nothing past the size is read,
// even when the memory behind it is readable and holds the rest of a valid image.
TEST(SimModuleImageTest, SizedLoadReadsNothingPastTheSize) {
  const std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  std::shared_ptr<Module> module;
  for (size_t keep : {size_t{0}, size_t{16}, sizeof(Elf64_Ehdr), bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE(keep);
    EXPECT_EQ(Module::LoadSized(bytes.data(), keep, &module), CUDA_ERROR_INVALID_IMAGE);
    EXPECT_EQ(module, nullptr);
  }
  EXPECT_EQ(Module::LoadSized(bytes.data(), kMaxModuleImageSize + 1, &module), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(Module::LoadSized(nullptr, bytes.size(), &module), CUDA_ERROR_INVALID_VALUE);
  // The unsized load of the same buffer measures the whole image from its headers and loads it.
  ASSERT_EQ(Module::Load(bytes.data(), &module), CUDA_SUCCESS);
  module.reset();
  ASSERT_EQ(Module::LoadSized(bytes.data(), bytes.size(), &module), CUDA_SUCCESS);
  EXPECT_FALSE(module->kernels().empty());
  // A section table moved past the size, within the buffer: refused.
  std::vector<unsigned char> moved = bytes;
  moved.resize(bytes.size() * 2);
  Elf64_Ehdr eh;
  std::memcpy(&eh, moved.data(), sizeof(eh));
  std::memcpy(moved.data() + bytes.size(), moved.data() + eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr));
  eh.e_shoff = bytes.size();
  std::memcpy(moved.data(), &eh, sizeof(eh));
  module.reset();
  EXPECT_EQ(Module::LoadSized(moved.data(), bytes.size(), &module), CUDA_ERROR_INVALID_IMAGE);
}

TEST(SimModuleImageTest, TruncatedFileIsInvalidImage) {
  const std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  const std::string path = TempPath("truncated.simgpu.so");
  WriteFile(path, std::vector<unsigned char>(bytes.begin(), bytes.end() - 1));
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile(path.c_str(), &module), CUDA_ERROR_INVALID_IMAGE);
  WriteFile(path, {});
  EXPECT_EQ(Module::LoadFile(path.c_str(), &module), CUDA_ERROR_INVALID_IMAGE);
  unlink(path.c_str());
}

TEST(SimModuleImageTest, MissingFileIsFileNotFound) {
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile("/nonexistent/kernels.simgpu.so", &module), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(Module::LoadFile("/", &module), CUDA_ERROR_FILE_NOT_FOUND);
}

// Header fields that each make the image something other than a module for this host, or whose
// tables point outside any plausible image.
TEST(SimModuleImageTest, CorruptHeadersAreInvalidImage) {
  const std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  ASSERT_GE(bytes.size(), sizeof(Elf64_Ehdr));
  struct Case {
    const char* what;
    void (*corrupt)(Elf64_Ehdr*);
  };
  const Case cases[] = {
      {"magic", [](Elf64_Ehdr* h) { h->e_ident[EI_MAG1] = 'X'; }},
      {"32-bit", [](Elf64_Ehdr* h) { h->e_ident[EI_CLASS] = ELFCLASS32; }},
      {"big-endian", [](Elf64_Ehdr* h) { h->e_ident[EI_DATA] = ELFDATA2MSB; }},
      {"executable", [](Elf64_Ehdr* h) { h->e_type = ET_EXEC; }},
      {"relocatable", [](Elf64_Ehdr* h) { h->e_type = ET_REL; }},
      {"machine", [](Elf64_Ehdr* h) { h->e_machine = EM_AARCH64 + EM_X86_64 - h->e_machine; }},
      {"version", [](Elf64_Ehdr* h) { h->e_version = 2; }},
      {"no program headers", [](Elf64_Ehdr* h) { h->e_phnum = 0; }},
      {"program header size", [](Elf64_Ehdr* h) { h->e_phentsize = 32; }},
      {"program headers far away", [](Elf64_Ehdr* h) { h->e_phoff = uint64_t{1} << 62; }},
      {"program headers overflow", [](Elf64_Ehdr* h) { h->e_phoff = ~uint64_t{0} - 8; }},
      {"section headers far away", [](Elf64_Ehdr* h) { h->e_shoff = uint64_t{1} << 63; }},
      {"section headers past the end", [](Elf64_Ehdr* h) { h->e_shoff += 4096; }},
      {"section header size", [](Elf64_Ehdr* h) { h->e_shentsize = 40; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<unsigned char> corrupt = bytes;
    Elf64_Ehdr header;
    std::memcpy(&header, corrupt.data(), sizeof header);
    c.corrupt(&header);
    std::memcpy(corrupt.data(), &header, sizeof header);
    EXPECT_EQ(LoadGuarded(corrupt), CUDA_ERROR_INVALID_IMAGE);
  }
}

TEST(SimModuleImageTest, SegmentPastTheEndIsInvalidImage) {
  std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  Elf64_Phdr ph;
  unsigned char* at = bytes.data() + eh.e_phoff;
  std::memcpy(&ph, at, sizeof ph);
  ph.p_filesz = uint64_t{1} << 40;
  std::memcpy(at, &ph, sizeof ph);
  EXPECT_EQ(LoadGuarded(bytes), CUDA_ERROR_INVALID_IMAGE);
}

TEST(SimModuleImageTest, MeasuresTheImageInsideALargerBuffer) {
  std::vector<unsigned char> bytes = ReadFileBytes(PHOS_TEST_MODULE);
  const size_t size = bytes.size();
  bytes.resize(size + 10000, 0xab);
  ImageFile file;
  ASSERT_EQ(file.Create(), CUDA_SUCCESS);
  size_t measured = 0;
  ASSERT_EQ(MeasureElfImage(bytes.data(), 0, &file, &measured), CUDA_SUCCESS);
  EXPECT_EQ(measured, size);
  std::shared_ptr<Module> module;
  ASSERT_EQ(Module::Load(bytes.data(), &module), CUDA_SUCCESS);
  EXPECT_EQ(module->image_size(), size);
}

TEST(SimModuleImageTest, SharedObjectsThatAreNotModulesAreInvalidImage) {
  const std::string libm = LibmPath();
  ASSERT_FALSE(libm.empty());
  EXPECT_EQ(LoadGuarded(ReadFileBytes(libm)), CUDA_ERROR_INVALID_IMAGE);
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile(libm.c_str(), &module), CUDA_ERROR_INVALID_IMAGE);
  // A position-independent executable is ET_DYN too; glibc refuses to dlopen it.
  EXPECT_EQ(LoadGuarded(ReadFileBytes("/proc/self/exe")), CUDA_ERROR_INVALID_IMAGE);
}

TEST(SimModuleImageTest, OtherModuleAbiVersionIsInvalidImage) {
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile(PHOS_TEST_MODULE_BAD_ABI, &module), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(module, nullptr);
}

TEST(SimModuleImageTest, KernelWithoutExternalLinkageIsInvalidImage) {
  std::shared_ptr<Module> module;
  EXPECT_EQ(Module::LoadFile(PHOS_TEST_MODULE_INTERNAL_LINKAGE, &module), CUDA_ERROR_INVALID_IMAGE);
}

// Nothing can run the nvcc build here; that it is produced from the same headers, and is a fatbin,
// is what can be checked. simgpu refuses it like any non-module image.
TEST(SimModuleImageTest, NvccFatbinIsBuiltFromTheSameHeaders) {
  const std::string fatbin = PHOS_TEST_CUDA_MODULE;
  if (fatbin.empty()) GTEST_SKIP() << "built without PHOS_WITH_CUDA";
  const std::vector<unsigned char> bytes = ReadFileBytes(fatbin);
  ASSERT_GE(bytes.size(), 16u) << fatbin;
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  EXPECT_EQ(magic, 0xBA55ED50u);  // the fat binary header magic that nvcc -fatbin writes
  EXPECT_EQ(LoadGuarded(bytes), CUDA_ERROR_INVALID_IMAGE);
}

}  // namespace
}  // namespace phos::sim
