// Loading simgpu modules built by phos_add_kernel_module() and running their kernels.
#include "module/module.h"

#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/atomics.cuh"
#include "kernels/basic.cuh"
#include "test_support.h"

namespace phos::sim {
namespace {

using testing::Geometry;
using testing::GetKernel;
using testing::Launch;
using testing::LoadModuleFile;

// The names nvcc 13.0 gives these kernels (readelf -s of `nvcc -cubin -arch=sm_80` of the same
// headers), and each kernel's parameters as nvcc lays them out (EIATTR_KPARAM_INFO of that cubin).
struct ExpectedKernel {
  const char* name;
  std::vector<KernelParam> params;
};
const std::vector<ExpectedKernel>& ExpectedKernels() {
  static const std::vector<ExpectedKernel> kernels = {
      {"_Z7vec_addPKfS0_Pfi", {{0, 8}, {8, 8}, {16, 8}, {24, 4}}},
      {"_Z12write_coordsPj", {{0, 8}}},
      {"_Z12mixed_paramscdiPd4Vec39Aligned16", {{0, 1}, {8, 8}, {16, 4}, {24, 8}, {32, 12}, {48, 16}}},
      {"_Z19param_is_per_threadiPi", {{0, 4}, {8, 8}}},
      {"_Z4fillIfEvPT_S0_i", {{0, 8}, {8, 4}, {12, 4}}},
      {"_Z4fillIiEvPT_S0_i", {{0, 8}, {8, 4}, {12, 4}}},
      {"_Z4fillIjEvPT_S0_i", {{0, 8}, {8, 4}, {12, 4}}},
      {"_ZN3ops4reluEPfy", {{0, 8}, {8, 8}}},
      {"_Z10accumulateP12AtomicTotalsPiii", {{0, 8}, {8, 8}, {16, 4}, {20, 4}}},
      {"_Z12count_launchv", {}},
      {"_Z17read_launch_countPj", {{0, 8}}},
  };
  return kernels;
}

std::vector<std::string> KernelNames(const Module& module) {
  std::vector<std::string> names;
  for (const Kernel& k : module.kernels()) names.push_back(k.name());
  return names;
}

unsigned LaunchCount(const Module& module) {
  unsigned count = 0;
  unsigned* out = &count;
  Launch(*GetKernel(module, "_Z17read_launch_countPj"), Geometry(1, 1, 1, 1, 1, 1), {&out});
  return count;
}

void CountLaunch(const Module& module) {
  Launch(*GetKernel(module, "_Z12count_launchv"), Geometry(3, 1, 1, 4, 1, 1), {});
}

TEST(SimModuleTest, KernelsCarryNvccNamesInSourceOrder) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  std::vector<std::string> expected;
  for (const ExpectedKernel& k : ExpectedKernels()) expected.push_back(k.name);
  EXPECT_EQ(KernelNames(*module), expected);

  const Kernel* kernel = nullptr;
  EXPECT_EQ(module->GetFunction("_Z7vec_addPKfS0_Pfi", &kernel), CUDA_SUCCESS);
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->name(), "_Z7vec_addPKfS0_Pfi");
  EXPECT_EQ(module->GetFunction("vec_add", &kernel), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(module->GetFunction("_Z5scalePffi", &kernel), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(module->GetFunction(nullptr, &kernel), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(module->GetFunction("_Z7vec_addPKfS0_Pfi", nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimModuleTest, ParamLayoutMatchesNvcc) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  for (const ExpectedKernel& expected : ExpectedKernels()) {
    SCOPED_TRACE(expected.name);
    const Kernel* kernel = GetKernel(*module, expected.name);
    ASSERT_NE(kernel, nullptr);
    ASSERT_EQ(kernel->params().size(), expected.params.size());
    for (size_t i = 0; i < expected.params.size(); ++i) {
      EXPECT_EQ(kernel->params()[i].offset, expected.params[i].offset) << "param " << i;
      EXPECT_EQ(kernel->params()[i].size, expected.params[i].size) << "param " << i;
    }
    const size_t end =
        expected.params.empty() ? 0 : expected.params.back().offset + expected.params.back().size;
    EXPECT_EQ(kernel->param_buffer_size(), end);
  }
}

TEST(SimModuleTest, VecAdd) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; ++i) a[i] = static_cast<float>(i), b[i] = 0.5f * static_cast<float>(i);
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = c.data();
  int count = n;
  Launch(*GetKernel(*module, "_Z7vec_addPKfS0_Pfi"), Geometry(4, 1, 1, 256, 1, 1), {&pa, &pb, &pc, &count});
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], 1.5f * static_cast<float>(i)) << i;
}

TEST(SimModuleTest, GridStrideWithFewerThreadsThanElements) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  const int n = 10007;  // 64 threads, each covering ~156 elements
  std::vector<float> a(n, 2.0f), b(n), c(n, 0.0f);
  std::iota(b.begin(), b.end(), 0.0f);
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = c.data();
  int count = n;
  Launch(*GetKernel(*module, "_Z7vec_addPKfS0_Pfi"), Geometry(2, 1, 1, 32, 1, 1), {&pa, &pb, &pc, &count});
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], 2.0f + static_cast<float>(i)) << i;
}

// Runs write_coords and checks every thread's record: 12 values per thread, x fastest.
void CheckCoords(const Module& module, const LaunchGeometry& g) {
  const unsigned threads = g.block[0] * g.block[1] * g.block[2];
  const unsigned blocks = g.grid[0] * g.grid[1] * g.grid[2];
  std::vector<unsigned> out(size_t{12} * threads * blocks, ~0u);
  unsigned* p = out.data();
  Launch(*GetKernel(module, "_Z12write_coordsPj"), g, {&p});
  size_t at = 0;
  for (unsigned bz = 0; bz < g.grid[2]; ++bz) {
    for (unsigned by = 0; by < g.grid[1]; ++by) {
      for (unsigned bx = 0; bx < g.grid[0]; ++bx) {
        for (unsigned tz = 0; tz < g.block[2]; ++tz) {
          for (unsigned ty = 0; ty < g.block[1]; ++ty) {
            for (unsigned tx = 0; tx < g.block[0]; ++tx, at += 12) {
              const std::vector<unsigned> record(out.begin() + at, out.begin() + at + 12);
              const std::vector<unsigned> expected = {tx,         ty,        tz,         bx,
                                                      by,         bz,        g.block[0], g.block[1],
                                                      g.block[2], g.grid[0], g.grid[1],  g.grid[2]};
              ASSERT_EQ(record, expected)
                  << "block " << bx << "," << by << "," << bz << " thread " << tx << "," << ty << "," << tz;
            }
          }
        }
      }
    }
  }
}

TEST(SimModuleTest, TwoDimensionalIndexing) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  CheckCoords(*module, Geometry(3, 2, 1, 4, 3, 1));
}

TEST(SimModuleTest, ThreeDimensionalIndexing) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  CheckCoords(*module, Geometry(2, 3, 4, 2, 5, 3));
}

TEST(SimModuleTest, SplitRangesOnTwoThreadsMatchOneRange) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  const Kernel& kernel = *GetKernel(*module, "_Z12write_coordsPj");
  const LaunchGeometry g = Geometry(7, 5, 3, 8, 4, 2);
  const uint64_t blocks = kernel.block_count(g);
  ASSERT_EQ(blocks, 105u);
  const size_t values = 12 * 64 * blocks;

  std::vector<unsigned> whole(values, ~0u), split(values, ~0u);
  unsigned* p_whole = whole.data();
  unsigned* p_split = split.data();
  KernelArgs whole_args, split_args;
  void* whole_params[] = {&p_whole};
  void* split_params[] = {&p_split};
  ASSERT_EQ(kernel.CaptureArgs(whole_params, nullptr, &whole_args), CUDA_SUCCESS);
  ASSERT_EQ(kernel.CaptureArgs(split_params, nullptr, &split_args), CUDA_SUCCESS);

  kernel.RunBlocks(g, whole_args.pointers(), 0, blocks);
  std::thread first([&] { kernel.RunBlocks(g, split_args.pointers(), 0, 53); });
  std::thread second([&] { kernel.RunBlocks(g, split_args.pointers(), 53, blocks); });
  first.join();
  second.join();
  EXPECT_EQ(whole, split);
  EXPECT_EQ(std::count(whole.begin(), whole.end(), ~0u), 0);
}

TEST(SimModuleTest, MixedParamsArriveIntact) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  const Kernel& kernel = *GetKernel(*module, "_Z12mixed_paramscdiPd4Vec39Aligned16");
  char c = 'x';
  double d = 2.25;
  int i = -7;
  double out[8] = {};
  double* pout = out;
  Vec3 v{1.5f, 2.5f, 3.5f};
  Aligned16 s{};
  s.a = 4.75;
  s.b = 42;
  Launch(kernel, Geometry(2, 1, 1, 2, 1, 1), {&c, &d, &i, &pout, &v, &s});
  const double expected[8] = {'x', 2.25, -7, 1.5, 2.5, 3.5, 4.75, 42};
  for (int k = 0; k < 8; ++k) EXPECT_EQ(out[k], expected[k]) << k;
}

TEST(SimModuleTest, EachThreadStartsFromTheLaunchParameters) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  int base = 100;
  std::vector<int> out(16, 0);
  int* p = out.data();
  Launch(*GetKernel(*module, "_Z19param_is_per_threadiPi"), Geometry(1, 1, 1, 16, 1, 1), {&base, &p});
  for (int t = 0; t < 16; ++t) EXPECT_EQ(out[t], 100 + t);
}

TEST(SimModuleTest, TemplateKernels) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  const int n = 300;
  int count = n;
  std::vector<float> f(n, 0.0f);
  std::vector<int> i(n, 0);
  std::vector<unsigned> u(n, 0);
  float* pf = f.data();
  int* pi = i.data();
  unsigned* pu = u.data();
  float fv = 3.5f;
  int iv = -9;
  unsigned uv = 4000000000u;
  Launch(*GetKernel(*module, "_Z4fillIfEvPT_S0_i"), Geometry(2, 1, 1, 64, 1, 1), {&pf, &fv, &count});
  Launch(*GetKernel(*module, "_Z4fillIiEvPT_S0_i"), Geometry(2, 1, 1, 64, 1, 1), {&pi, &iv, &count});
  Launch(*GetKernel(*module, "_Z4fillIjEvPT_S0_i"), Geometry(2, 1, 1, 64, 1, 1), {&pu, &uv, &count});
  EXPECT_EQ(std::count(f.begin(), f.end(), 3.5f), n);
  EXPECT_EQ(std::count(i.begin(), i.end(), -9), n);
  EXPECT_EQ(std::count(u.begin(), u.end(), 4000000000u), n);
}

TEST(SimModuleTest, NamespacedKernel) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  std::vector<float> x = {-1.0f, 2.0f, -3.0f, 4.0f, -0.5f};
  float* px = x.data();
  unsigned long long n = x.size();
  Launch(*GetKernel(*module, "_ZN3ops4reluEPfy"), Geometry(1, 1, 1, 8, 1, 1), {&px, &n});
  EXPECT_EQ(x, (std::vector<float>{0.0f, 2.0f, 0.0f, 4.0f, 0.0f}));
}

TEST(SimModuleTest, AtomicsAcrossConcurrentBlockRanges) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  const Kernel& kernel = *GetKernel(*module, "_Z10accumulateP12AtomicTotalsPiii");
  const int n = 64 * 256;
  const int bin_count = 10;
  AtomicTotals totals{};
  totals.int_max = -1;
  totals.int_min = n;
  std::vector<int> bins(bin_count, 0);
  AtomicTotals* pt = &totals;
  int* pb = bins.data();
  int bc = bin_count;
  int count = n;
  void* params[] = {&pt, &pb, &bc, &count};
  KernelArgs args;
  ASSERT_EQ(kernel.CaptureArgs(params, nullptr, &args), CUDA_SUCCESS);
  const LaunchGeometry g = Geometry(64, 1, 1, 256, 1, 1);

  // Four workers on interleaved small ranges, so that they contend on every total.
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (uint64_t b = w; b < 64; b += 4) kernel.RunBlocks(g, args.pointers(), b, b + 1);
    });
  }
  for (std::thread& t : workers) t.join();

  const long long sum = static_cast<long long>(n) * (n - 1) / 2;
  EXPECT_EQ(totals.int_sum, sum);
  EXPECT_EQ(totals.uint_sum, static_cast<unsigned>(sum));
  EXPECT_EQ(totals.ull_sum, static_cast<unsigned long long>(sum));
  EXPECT_EQ(totals.float_sum, static_cast<float>(n));  // exact: every partial sum is an integer < 2^24
  EXPECT_EQ(totals.double_sum, static_cast<double>(sum));
  EXPECT_EQ(totals.int_max, n - 1);
  EXPECT_EQ(totals.int_min, 0);
  EXPECT_EQ(totals.cas_count, n);
  EXPECT_EQ(totals.cas_ull_max, 3ull * (n - 1));
  for (int b = 0; b < bin_count; ++b) EXPECT_EQ(bins[b], n / bin_count + (b < n % bin_count ? 1 : 0)) << b;
}

TEST(SimModuleTest, TwoModulesDoNotShareState) {
  auto a = LoadModuleFile(PHOS_TEST_MODULE);
  auto b = LoadModuleFile(PHOS_TEST_MODULE_B);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(KernelNames(*b),
            (std::vector<std::string>{"_Z5scalePffi", "_Z12count_launchv", "_Z17read_launch_countPj"}));
  EXPECT_EQ(a->kernels().size(), ExpectedKernels().size());

  for (int i = 0; i < 3; ++i) CountLaunch(*a);
  CountLaunch(*b);
  EXPECT_EQ(LaunchCount(*a), 3u);
  EXPECT_EQ(LaunchCount(*b), 1u);

  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  float* px = x.data();
  float factor = 2.0f;
  int n = 3;
  Launch(*GetKernel(*b, "_Z5scalePffi"), Geometry(1, 1, 1, 32, 1, 1), {&px, &factor, &n});
  EXPECT_EQ(x, (std::vector<float>{2.0f, 4.0f, 6.0f}));
}

TEST(SimModuleTest, TwoLoadsOfOneImageDoNotShareState) {
  const std::vector<unsigned char> bytes = testing::ReadFileBytes(PHOS_TEST_MODULE);
  std::shared_ptr<Module> first, second;
  ASSERT_EQ(Module::Load(bytes.data(), &first), CUDA_SUCCESS);
  ASSERT_EQ(Module::Load(bytes.data(), &second), CUDA_SUCCESS);
  CountLaunch(*first);
  CountLaunch(*first);
  CountLaunch(*second);
  EXPECT_EQ(LaunchCount(*first), 2u);
  EXPECT_EQ(LaunchCount(*second), 1u);

  // The second keeps working once the first is gone.
  first.reset();
  CountLaunch(*second);
  EXPECT_EQ(LaunchCount(*second), 2u);
}

TEST(SimModuleTest, UnloadThenLoadAgainStartsFresh) {
  auto module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  CountLaunch(*module);
  CountLaunch(*module);
  ASSERT_EQ(LaunchCount(*module), 2u);
  module.reset();

  module = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(LaunchCount(*module), 0u);  // a fresh instance, not the old one kept alive
  CountLaunch(*module);
  EXPECT_EQ(LaunchCount(*module), 1u);
}

std::set<std::string> LoadedFdObjects() {
  std::set<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && std::strncmp(info->dlpi_name, "/proc/self/fd/", 14) == 0) {
          static_cast<std::set<std::string>*>(data)->insert(info->dlpi_name);
        }
        return 0;
      },
      &names);
  return names;
}

// glibc hands back an already loaded object whose name equals the path given to dlopen. An object
// that outlives its Module (here: an extra reference) keeps its "/proc/self/fd/N" name after N is
// closed; the next load, whose memfd gets N again, must not be given the old object.
TEST(SimModuleTest, StaleObjectDoesNotCaptureTheNextLoad) {
  const std::set<std::string> before = LoadedFdObjects();
  auto a = LoadModuleFile(PHOS_TEST_MODULE);
  ASSERT_NE(a, nullptr);
  std::string a_name;
  for (const std::string& name : LoadedFdObjects()) {
    if (before.count(name) == 0) a_name = name;
  }
  ASSERT_FALSE(a_name.empty());
  void* extra_reference = dlopen(a_name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(extra_reference, nullptr);
  a.reset();
  ASSERT_EQ(LoadedFdObjects().count(a_name), 1u);  // still loaded, under its old name

  auto b = LoadModuleFile(PHOS_TEST_MODULE_B);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(KernelNames(*b).front(), "_Z5scalePffi");
  const Kernel* kernel = nullptr;
  EXPECT_EQ(b->GetFunction("_Z7vec_addPKfS0_Pfi", &kernel), CUDA_ERROR_NOT_FOUND);
  dlclose(extra_reference);
}

TEST(SimModuleTest, ImageDataIsTheLoadedBytes) {
  const std::vector<unsigned char> bytes = testing::ReadFileBytes(PHOS_TEST_MODULE);
  ASSERT_FALSE(bytes.empty());
  std::shared_ptr<Module> from_memory, from_file;
  ASSERT_EQ(Module::Load(bytes.data(), &from_memory), CUDA_SUCCESS);
  ASSERT_EQ(Module::LoadFile(PHOS_TEST_MODULE, &from_file), CUDA_SUCCESS);
  for (const auto& module : {from_memory, from_file}) {
    ASSERT_EQ(module->image_size(), bytes.size());
    EXPECT_EQ(std::memcmp(module->image_data(), bytes.data(), bytes.size()), 0);
  }
}

// What the module exports, read from its .dynsym: its kernels and its table, never the simulated
// thread indices or the registry (phos::kernel::sim), and nothing STB_GNU_UNIQUE.
TEST(SimModuleTest, ModuleKeepsItsInternalsPrivate) {
  const std::vector<unsigned char> bytes = testing::ReadFileBytes(PHOS_TEST_MODULE);
  ASSERT_GE(bytes.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), bytes.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  std::set<std::string> exported;
  int unique = 0;
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM) continue;
    const char* strings = reinterpret_cast<const char*>(bytes.data() + sections[sh.sh_link].sh_offset);
    for (size_t i = 0; i < sh.sh_size / sizeof(Elf64_Sym); ++i) {
      Elf64_Sym sym;
      std::memcpy(&sym, bytes.data() + sh.sh_offset + i * sizeof sym, sizeof sym);
      if (ELF64_ST_BIND(sym.st_info) == STB_GNU_UNIQUE) ++unique;
      if (sym.st_shndx != SHN_UNDEF && ELF64_ST_BIND(sym.st_info) != STB_LOCAL)
        exported.insert(strings + sym.st_name);
    }
  }
  EXPECT_EQ(unique, 0);
  EXPECT_EQ(exported.count("phos_sim_module_info"), 1u);
  for (const ExpectedKernel& k : ExpectedKernels()) EXPECT_EQ(exported.count(k.name), 1u) << k.name;
  for (const std::string& name : exported) {
    EXPECT_EQ(name.find("threadIdx"), std::string::npos);
    EXPECT_EQ(name.find("blockIdx"), std::string::npos);
    EXPECT_EQ(name.find("blockDim"), std::string::npos);
    EXPECT_EQ(name.find("gridDim"), std::string::npos);
    EXPECT_NE(name.rfind("_ZN4phos6kernel3sim", 0), 0u) << name;
  }
}

}  // namespace
}  // namespace phos::sim
