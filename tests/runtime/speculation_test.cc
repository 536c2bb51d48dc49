#include "phos/runtime/speculation.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "phos/driver/driver_table.h"
#include "phos/runtime/param_metadata.h"

namespace phos::runtime {
namespace {

constexpr ParamAccess R = ParamAccess::kRead;
constexpr ParamAccess RW = ParamAccess::kReadWrite;
constexpr ParamAccess S = ParamAccess::kScan;

std::vector<ParamAccess> Kinds(const std::string& mangled, std::vector<ParamSlotLayout> layout) {
  KernelParamMetadata meta = BuildParamMetadata(mangled, layout);
  EXPECT_EQ(meta.source, ParamKindSource::kDemangled) << mangled << ": " << ParamKindSourceName(meta.source);
  std::vector<ParamAccess> kinds;
  for (const ParamMeta& p : meta.params) kinds.push_back(p.access);
  return kinds;
}

// Layouts of 8-byte slots, enough for kind tests whose pointers must be 8 bytes.
std::vector<ParamSlotLayout> Slots(size_t n) {
  std::vector<ParamSlotLayout> layout;
  for (size_t i = 0; i < n; ++i) layout.push_back({static_cast<uint32_t>(8 * i), 8});
  return layout;
}

TEST(ParamMetadataTest, RealKernelNamesFromTheTree) {
  // tests/simgpu/module/module_test.cc and tests/conformance/kernels/kernel_names.h, with the
  // layouts simgpu reports for them.
  EXPECT_EQ(Kinds("_Z7vec_addPKfS0_Pfi", {{0, 8}, {8, 8}, {16, 8}, {24, 4}}), (std::vector{R, R, RW, S}));
  EXPECT_EQ(
      Kinds("_Z12mixed_paramscdiPd4Vec39Aligned16", {{0, 1}, {8, 8}, {16, 4}, {24, 8}, {32, 12}, {48, 16}}),
      (std::vector{S, S, S, RW, S, S}));
  EXPECT_EQ(Kinds("_Z4fillIfEvPT_S0_i", {{0, 8}, {8, 4}, {12, 4}}), (std::vector{RW, S, S}));
  EXPECT_EQ(Kinds("_Z10accumulateP12AtomicTotalsPiii", {{0, 8}, {8, 8}, {16, 4}, {20, 4}}),
            (std::vector{RW, RW, S, S}));
  EXPECT_EQ(Kinds("_Z12count_launchv", {}), std::vector<ParamAccess>{});
  EXPECT_EQ(Kinds("_Z19param_is_per_threadiPi", {{0, 4}, {8, 8}}), (std::vector{S, RW}));
  EXPECT_EQ(Kinds("_Z14record_threadsPjS_", Slots(2)), (std::vector{RW, RW}));
  EXPECT_EQ(Kinds("_Z12mixed_paramscdPKisf9ParamPairxPx",
                  {{0, 1}, {8, 8}, {16, 8}, {24, 2}, {28, 4}, {32, 16}, {48, 8}, {56, 8}}),
            (std::vector{S, S, R, S, S, S, S, RW}));
}

TEST(ParamMetadataTest, HarderSignatures) {
  // __restrict__, const pointer to non-const, pointer to const pointer, volatile.
  EXPECT_EQ(Kinds("_Z3foorPKfrPf", Slots(2)), (std::vector{R, RW}));
  EXPECT_EQ(Kinds("_Z3fooKPfPKPf", Slots(2)), (std::vector{RW, R}));
  EXPECT_EQ(Kinds("_Z3fooPVKfPVf", Slots(2)), (std::vector{R, RW}));
  // Function pointer holding a comma, then a pointer; references; pointer to member function.
  EXPECT_EQ(Kinds("_Z3fooPFviiEPi", Slots(2)), (std::vector{S, RW}));
  EXPECT_EQ(Kinds("_Z3fooRKfRf", Slots(2)), (std::vector{S, S}));
  EXPECT_EQ(Kinds("_Z3fooM1AFviEPKd", {{0, 16}, {16, 8}}), (std::vector{S, R}));
  // Templates with commas, nested namespaces, a template function's return type.
  EXPECT_EQ(Kinds("_Z3bazPN2ns3FooIifEEN2ns5InnerIiLi3EEE", {{0, 8}, {8, 4}}), (std::vector{RW, S}));
  EXPECT_EQ(Kinds("_Z6kernelIN4cute5tupleIJiiEEEEvT_PKS3_", {{0, 8}, {8, 8}}), (std::vector{S, R}));
  // Anonymous namespace (a parenthesised group before the list), clone suffix, arrays.
  EXPECT_EQ(Kinds("_ZN12_GLOBAL__N_16kernelEPKdPd", Slots(2)), (std::vector{R, RW}));
  EXPECT_EQ(Kinds("_Z3fooPf.constprop.0", Slots(1)), (std::vector{RW}));
  EXPECT_EQ(Kinds("_Z3fooPA4_KfPA4_A2_f", Slots(2)), (std::vector{R, RW}));
}

TEST(ParamMetadataTest, TypeRulesOnSpelledTypes) {
  EXPECT_EQ(AccessOfType("const float*"), R);
  EXPECT_EQ(AccessOfType("const float**"), RW);
  EXPECT_EQ(AccessOfType("float const* const"), R);
  EXPECT_EQ(AccessOfType("float* __restrict__"), RW);
  EXPECT_EQ(AccessOfType("int A::*"), S);
  EXPECT_EQ(AccessOfType("myconst*"), RW);  // "const" only as a word
  EXPECT_EQ(AccessOfType("Vec3"), S);
}

TEST(ParamMetadataTest, SplitsParameterLists) {
  auto types =
      SplitParameterTypes("void k<Foo<int, float>, 2>(Foo<int, float>, void (*)(int, char), float const*)");
  ASSERT_TRUE(types.ok()) << types.status().ToString();
  EXPECT_EQ(*types, (std::vector<std::string>{"Foo<int, float>", "void (*)(int, char)", "float const*"}));
  auto none = SplitParameterTypes("f(void)");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(SplitParameterTypes("foo(...)").ok());
  EXPECT_FALSE(SplitParameterTypes("foo(int").ok());
  EXPECT_FALSE(SplitParameterTypes("not a signature").ok());
  EXPECT_FALSE(SplitParameterTypes("foo(int, )").ok());
}

TEST(ParamMetadataTest, FallsBackToScanAndSaysWhy) {
  KernelParamMetadata plain = BuildParamMetadata("vec_add_c", Slots(2));
  EXPECT_EQ(plain.source, ParamKindSource::kNotMangled);
  KernelParamMetadata broken = BuildParamMetadata("_Z3fooP", Slots(1));
  EXPECT_EQ(broken.source, ParamKindSource::kDemangleFailed);
  KernelParamMetadata variadic = BuildParamMetadata("_Z3fooz", Slots(1));
  EXPECT_EQ(variadic.source, ParamKindSource::kDemangleFailed);
  // Three parsed parameters, two in the layout.
  KernelParamMetadata mismatch = BuildParamMetadata("_Z7vec_addPKfS0_Pfi", Slots(2));
  EXPECT_EQ(mismatch.source, ParamKindSource::kCountMismatch);
  for (const auto* meta : {&plain, &broken, &variadic, &mismatch}) {
    for (const ParamMeta& p : meta->params) EXPECT_EQ(p.access, S) << meta->name;
  }
  EXPECT_EQ(mismatch.param_bytes, 16u);
  // A "pointer" that is not 8 bytes wide cannot be one: scanned.
  EXPECT_EQ(BuildParamMetadata("_Z3fooPf", std::vector<ParamSlotLayout>{{0, 4}}).params[0].access, S);
  EXPECT_FALSE(Demangle("_Z3fooP").ok());
}

TEST(ParamMetadataCacheTest, HitsMissesAndFallbacks) {
  ParamMetadataCache cache;
  ModuleHash m1{1, 2}, m2{3, 4};
  auto layout = std::vector<ParamSlotLayout>{{0, 8}, {8, 8}, {16, 8}, {24, 4}};
  EXPECT_EQ(cache.Find(m1, "_Z7vec_addPKfS0_Pfi"), nullptr);
  auto a = cache.GetOrBuild(m1, "_Z7vec_addPKfS0_Pfi", layout);
  auto b = cache.GetOrBuild(m1, "_Z7vec_addPKfS0_Pfi", layout);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(cache.Find(m1, "_Z7vec_addPKfS0_Pfi").get(), a.get());
  // Same name in another module image: another entry.
  auto c = cache.GetOrBuild(m2, "_Z7vec_addPKfS0_Pfi", layout);
  EXPECT_NE(a.get(), c.get());
  cache.GetOrBuild(m2, "extern_c_kernel", layout);
  ParamMetadataCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_EQ(stats.fallbacks, 1u);
  EXPECT_EQ(cache.size(), 3u);
}

TEST(ParamMetadataCacheTest, ConcurrentBuildersShareOneEntry) {
  ParamMetadataCache cache;
  auto layout = Slots(2);
  std::vector<const KernelParamMetadata*> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i)
        seen[t] = cache.GetOrBuild({7, 7}, "_Z14record_threadsPjS_", layout).get();
    });
  }
  for (auto& t : threads) t.join();
  for (auto* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().hits, 799u);
}

// A table of three buffers far from anything a float or a size looks like.
class SpeculationTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kA = 0x7f0000100000, kB = 0x7f0000200000, kC = 0x7f0000300000;
  static constexpr uint64_t kBytes = 4096;

  void SetUp() override {
    for (uint64_t base : {kA, kB, kC}) ASSERT_TRUE(table_.Insert(base, kBytes).ok());
  }
  template <typename T>
  void Put(size_t offset, T value) {
    if (params_.size() < offset + sizeof(T)) params_.resize(offset + sizeof(T));
    std::memcpy(params_.data() + offset, &value, sizeof(T));
  }
  static bool ReadOnly(const AccessSets& s, uint64_t base) {
    return s.read.Contains(base) && !s.write.Contains(base);
  }
  static bool ReadWrite(const AccessSets& s, uint64_t base) {
    return s.read.Contains(base) && s.write.Contains(base);
  }
  static bool WriteOnly(const AccessSets& s, uint64_t base) {
    return !s.read.Contains(base) && s.write.Contains(base);
  }

  BufferTable table_;
  std::vector<uint8_t> params_;
  AccessSets sets_;
};

TEST_F(SpeculationTest, ConstPointersReadOthersReadWrite) {
  KernelParamMetadata meta = BuildParamMetadata(
      "_Z7vec_addPKfS0_Pfi", std::vector<ParamSlotLayout>{{0, 8}, {8, 8}, {16, 8}, {24, 4}});
  Put(0, kA);
  Put(8, kB + 100);  // interior pointer: names the whole buffer
  Put(16, kC);
  Put(24, int32_t{1024});
  ASSERT_TRUE(SpeculateLaunch(meta, params_, table_, &sets_).ok());
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_TRUE(ReadOnly(sets_, kB));
  EXPECT_TRUE(ReadWrite(sets_, kC));
  EXPECT_EQ(sets_.read.size(), 3u);
  EXPECT_EQ(sets_.write.size(), 1u);
  EXPECT_EQ(sets_.read.buffers()[1], (BufferRef{kB, kBytes}));
  EXPECT_TRUE(sets_.complete());
}

TEST_F(SpeculationTest, AGraphLaunchTouchesTheUnionOfItsNodes) {
  // memset A in full, then vec_add(A, A, B), then copy B to C in full, with an event between.
  KernelParamMetadata meta = BuildParamMetadata(
      "_Z7vec_addPKfS0_Pfi", std::vector<ParamSlotLayout>{{0, 8}, {8, 8}, {16, 8}, {24, 4}});
  Put(0, kA);
  Put(8, kA);
  Put(16, kB);
  Put(24, int32_t{1024});
  ipc::GraphNode memset{}, kernel{}, event{}, copy{};
  memset.type = CU_GRAPH_NODE_TYPE_MEMSET;
  memset.dst = kA, memset.element_size = 4, memset.width = kBytes / 4, memset.height = 1, memset.dst_pitch = kBytes;
  kernel.type = CU_GRAPH_NODE_TYPE_KERNEL;
  event.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  copy.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  copy.src = kB, copy.dst = kC, copy.width = kBytes, copy.height = 1, copy.src_pitch = copy.dst_pitch = kBytes;
  std::vector<GraphNodeAccess> nodes = {
      {&memset, {}, nullptr}, {&kernel, params_, &meta}, {&event, {}, nullptr}, {&copy, {}, nullptr}};
  ASSERT_TRUE(SpeculateGraphLaunch(nodes, table_, &sets_).ok());
  // A is overwritten in full by the memset but read by the kernel: read and written.
  EXPECT_TRUE(ReadWrite(sets_, kA));
  EXPECT_TRUE(ReadWrite(sets_, kB));
  // C is only ever overwritten in full.
  EXPECT_TRUE(WriteOnly(sets_, kC));
  EXPECT_TRUE(sets_.complete());
  // Only the copy: C written, B read; without the kernel's metadata the launch may touch anything.
  AccessSets alone;
  ASSERT_TRUE(SpeculateGraphLaunch(std::span(nodes).subspan(3), table_, &alone).ok());
  EXPECT_TRUE(ReadOnly(alone, kB));
  EXPECT_FALSE(alone.read.Contains(kA));
  // A host node touches no buffer: with one between the kernel and the copy the sets are the same.
  ipc::GraphNode host{};
  host.type = CU_GRAPH_NODE_TYPE_HOST;
  std::vector<GraphNodeAccess> with_host = nodes;
  with_host.insert(with_host.begin() + 2, GraphNodeAccess{&host, {}, nullptr});
  AccessSets hosted;
  ASSERT_TRUE(SpeculateGraphLaunch(with_host, table_, &hosted).ok());
  EXPECT_EQ(hosted.read.size(), sets_.read.size());
  EXPECT_EQ(hosted.write.size(), sets_.write.size());
  EXPECT_TRUE(ReadWrite(hosted, kA));
  EXPECT_TRUE(WriteOnly(hosted, kC));
  EXPECT_TRUE(hosted.complete());
  nodes[1].meta = nullptr;
  AccessSets unknown;
  EXPECT_FALSE(SpeculateGraphLaunch(nodes, table_, &unknown).ok());
}

TEST_F(SpeculationTest, StructHoldingADevicePointerIsFoundByScanning) {
  // mixed_params(char, double, int, double*, Vec3, Aligned16): the Aligned16 struct at 48 holds
  // a device pointer in its second word; Vec3 holds float bits; the double holds a value that is
  // no address.
  KernelParamMetadata meta =
      BuildParamMetadata("_Z12mixed_paramscdiPd4Vec39Aligned16",
                         std::vector<ParamSlotLayout>{{0, 1}, {8, 8}, {16, 4}, {24, 8}, {32, 12}, {48, 16}});
  Put(8, 3.5);
  Put(24, uint64_t{0});  // null pointer names nothing
  Put(32, 1.0f);
  Put(36, 2.0f);
  Put(40, 3.0f);
  Put(48, uint64_t{kBytes});  // a size
  Put(56, kB + 8);
  ASSERT_TRUE(SpeculateLaunch(meta, params_, table_, &sets_).ok());
  EXPECT_TRUE(ReadWrite(sets_, kB));
  EXPECT_EQ(sets_.read.size(), 1u);
  EXPECT_EQ(sets_.write.size(), 1u);
}

TEST_F(SpeculationTest, WordsThatAreNotAddressesNameNothing) {
  KernelParamMetadata meta = BuildParamMetadata("plain_c_kernel", std::vector<ParamSlotLayout>{{0, 32}});
  Put(0, 1.0e300);            // double bits
  Put(8, uint64_t{kBytes});   // a size
  Put(16, kC + kBytes);       // one past the end of the last buffer
  Put(24, kA + kBytes + 16);  // in the gap between two buffers
  ASSERT_TRUE(SpeculateLaunch(meta, params_, table_, &sets_).ok());
  EXPECT_TRUE(sets_.read.empty());
  EXPECT_TRUE(sets_.write.empty());
}

TEST_F(SpeculationTest, ShortParameterBufferIsRefused) {
  KernelParamMetadata meta = BuildParamMetadata(
      "_Z7vec_addPKfS0_Pfi", std::vector<ParamSlotLayout>{{0, 8}, {8, 8}, {16, 8}, {24, 4}});
  Put(0, kA);
  Status s = SpeculateLaunch(meta, params_, table_, &sets_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("_Z7vec_addPKfS0_Pfi"), std::string::npos) << s.message();
  // Metadata whose param_bytes understates a parameter's end is refused, not read past.
  Put(24, int32_t{1});
  meta.param_bytes = 8;
  meta.params[3].offset = 64;
  EXPECT_EQ(SpeculateLaunch(meta, params_, table_, &sets_).code(), StatusCode::kInvalidArgument);
}

TEST_F(SpeculationTest, TooManyBuffersOverflowTheSets) {
  BufferTable many;
  std::vector<ParamSlotLayout> layout;
  for (uint64_t i = 0; i < BufferSet::kCapacity + 1; ++i) {
    ASSERT_TRUE(many.Insert(kA + i * kBytes, kBytes).ok());
    layout.push_back({static_cast<uint32_t>(8 * i), 8});
    Put(8 * i, kA + i * kBytes);
  }
  KernelParamMetadata meta = BuildParamMetadata("plain_c_kernel", layout);
  ASSERT_TRUE(SpeculateLaunch(meta, params_, many, &sets_).ok());
  EXPECT_EQ(sets_.read.size(), BufferSet::kCapacity);
  EXPECT_FALSE(sets_.complete());
  sets_.Clear();
  EXPECT_TRUE(sets_.complete());
  EXPECT_TRUE(sets_.read.empty());
}

TEST_F(SpeculationTest, CopyRules) {
  // Device to device, whole destination: source read, destination write-only.
  SpeculateCopy(table_, kB, kA + 64, kBytes, &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_TRUE(WriteOnly(sets_, kB));
  // Host to device into part of a buffer: the rest must be loaded first.
  sets_.Clear();
  SpeculateCopy(table_, kC + 16, kHostSide, 128, &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kC));
  EXPECT_EQ(sets_.read.size(), 1u);
  // Device to host: read only.
  sets_.Clear();
  SpeculateCopy(table_, kHostSide, kA, 8, &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_TRUE(sets_.write.empty());
}

TEST_F(SpeculationTest, RangeOverAdjacentBuffersNamesEach) {
  BufferTable adjacent;
  ASSERT_TRUE(adjacent.Insert(kA, kBytes).ok());
  ASSERT_TRUE(adjacent.Insert(kA + kBytes, kBytes).ok());
  ASSERT_TRUE(adjacent.Insert(kA + 2 * kBytes, kBytes).ok());
  // From the middle of the first through all of the second into the third.
  SpeculateMemset(adjacent, kA + 100, 2 * kBytes, &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kA));
  EXPECT_TRUE(WriteOnly(sets_, kA + kBytes));
  EXPECT_TRUE(ReadWrite(sets_, kA + 2 * kBytes));
}

TEST_F(SpeculationTest, MemsetRules) {
  SpeculateMemset(table_, kA, kBytes, &sets_);
  EXPECT_TRUE(WriteOnly(sets_, kA));
  SpeculateMemset(table_, kB, kBytes - 1, &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kB));
  SpeculateMemset(table_, kC, 0, &sets_);
  EXPECT_FALSE(sets_.read.Contains(kC) || sets_.write.Contains(kC));
}

// A 32 x 32 fp32 GEMM of A, B into C, C (4096 bytes) exactly buffer C; host pointer mode.
ipc::GemmArgs Gemm32(uint64_t a, uint64_t b, uint64_t c, float beta) {
  ipc::GemmArgs g{};
  g.trans_a = CUBLAS_OP_N;
  g.trans_b = CUBLAS_OP_T;
  g.m = 32, g.n = 32, g.k = 16;
  g.lda = 32, g.ldb = 32, g.ldc = 32;
  g.a_type = g.b_type = g.c_type = CUDA_R_32F;
  g.compute_type = CUBLAS_COMPUTE_32F;
  g.algo = CUBLAS_GEMM_DEFAULT;
  g.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kNone);
  g.batch = 1;
  g.pointer_mode = CUBLAS_POINTER_MODE_HOST;
  g.a = a, g.b = b, g.c = c;
  std::memcpy(g.beta.bytes, &beta, sizeof(beta));
  return g;
}

TEST_F(SpeculationTest, GemmOperandRules) {
  ipc::GemmArgs g = Gemm32(kA, kB, kC, 0.0f);
  SpeculateBlas(table_, GemmOperands(g), &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_TRUE(ReadOnly(sets_, kB));
  EXPECT_TRUE(WriteOnly(sets_, kC));
  // beta != 0 reads C.
  sets_.Clear();
  g = Gemm32(kA, kB, kC, 1.0f);
  SpeculateBlas(table_, GemmOperands(g), &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kC));
  // beta == 0 but ldc leaves gaps between columns: rows 30..31 of each column stay as loaded.
  sets_.Clear();
  g = Gemm32(kA, kB, kC, 0.0f);
  g.m = 30;
  SpeculateBlas(table_, GemmOperands(g), &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kC));
  // beta == 0, dense, but C covers only half the buffer.
  sets_.Clear();
  g.m = 16, g.ldc = 16, g.lda = 16;
  SpeculateBlas(table_, GemmOperands(g), &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kC));
}

TEST_F(SpeculationTest, DeviceModeScalarsAreReadAndBetaIsUnknown) {
  // alpha and beta in buffer B (device pointer mode): B is read, and C is read too, since beta
  // may be anything when the call runs.
  ipc::GemmArgs g = Gemm32(kA, kA, kC, 0.0f);
  g.pointer_mode = CUBLAS_POINTER_MODE_DEVICE;
  const uint64_t alpha = kB, beta = kB + 4;
  std::memcpy(g.alpha.bytes, &alpha, sizeof(alpha));
  std::memcpy(g.beta.bytes, &beta, sizeof(beta));
  SpeculateBlas(table_, GemmOperands(g), &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kB));
  EXPECT_TRUE(ReadWrite(sets_, kC));
}

TEST_F(SpeculationTest, PointerArrayBatchReadsItsArraysAndEveryMatrixTheyName) {
  // Buffers D (the three arrays) and E, F, G (matrices); 2 entries of 16 x 16 fp32 (1024 bytes).
  constexpr uint64_t kD = 0x7f0000400000, kE = 0x7f0000500000, kF = 0x7f0000600000, kG = 0x7f0000700000;
  for (uint64_t base : {kD, kE, kF, kG}) ASSERT_TRUE(table_.Insert(base, 2048).ok());
  ipc::GemmArgs g = Gemm32(kD, kD + 16, kD + 32, 0.0f);
  g.trans_b = CUBLAS_OP_N;
  g.m = g.n = g.k = 16, g.lda = g.ldb = g.ldc = 16;
  g.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kPointers);
  g.batch = 2;
  // Entry 0: A in E, B in buffer A, C the first half of F; entry 1: A in G, B in buffer B, C the
  // second half of F. Buffer C is named by no entry.
  const std::vector<uint64_t> a = {kE, kG}, b = {kA, kB}, c = {kF, kF + 1024};
  SpeculateGemmBatch(table_, g, a, b, c, &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kD));  // the arrays
  for (uint64_t read : {kE, kG, kA, kB}) EXPECT_TRUE(ReadOnly(sets_, read)) << std::hex << read;
  // Each C covers half of F densely with beta 0: neither covers the whole buffer, so F is read too.
  EXPECT_TRUE(ReadWrite(sets_, kF));
  EXPECT_FALSE(sets_.read.Contains(kC) || sets_.write.Contains(kC));
  // One entry writing all of G (2048 bytes = 16 x 32) with beta 0 overwrites it without reading.
  sets_.Clear();
  g.n = 32, g.batch = 1;
  SpeculateGemmBatch(table_, g, std::vector<uint64_t>{kE}, std::vector<uint64_t>{kE}, std::vector<uint64_t>{kG},
                     &sets_);
  EXPECT_TRUE(WriteOnly(sets_, kG));
}

TEST_F(SpeculationTest, LevelOneWriteSets) {
  // 1024 floats: all of one buffer.
  ipc::BlasLevel1Args l{};
  l.type = CUDA_R_32F;
  l.pointer_mode = CUBLAS_POINTER_MODE_HOST;
  l.n = 1024, l.incx = 1, l.incy = 1;
  l.x = kA, l.y = kB;
  auto sets_of = [&](ipc::BlasLevel1 routine) {
    sets_.Clear();
    l.routine = static_cast<int32_t>(routine);
    SpeculateBlas(table_, Level1Operands(l), &sets_);
    return sets_;
  };
  // copy overwrites y; axpy reads and writes it; swap and rot both vectors; scal x.
  AccessSets s = sets_of(ipc::BlasLevel1::kCopy);
  EXPECT_TRUE(ReadOnly(s, kA) && WriteOnly(s, kB));
  s = sets_of(ipc::BlasLevel1::kAxpy);
  EXPECT_TRUE(ReadOnly(s, kA) && ReadWrite(s, kB));
  s = sets_of(ipc::BlasLevel1::kSwap);
  EXPECT_TRUE(ReadWrite(s, kA) && ReadWrite(s, kB));
  s = sets_of(ipc::BlasLevel1::kRot);
  EXPECT_TRUE(ReadWrite(s, kA) && ReadWrite(s, kB));
  s = sets_of(ipc::BlasLevel1::kScal);
  EXPECT_TRUE(ReadWrite(s, kA));
  EXPECT_FALSE(s.read.Contains(kB) || s.write.Contains(kB));
  // A host-mode reduction writes nothing on the device; in device mode it writes its result.
  s = sets_of(ipc::BlasLevel1::kDot);
  EXPECT_TRUE(ReadOnly(s, kA) && ReadOnly(s, kB));
  EXPECT_TRUE(s.write.empty());
  l.pointer_mode = CUBLAS_POINTER_MODE_DEVICE;
  l.result = kC + 8;
  s = sets_of(ipc::BlasLevel1::kNrm2);
  EXPECT_TRUE(ReadOnly(s, kA));
  EXPECT_TRUE(ReadWrite(s, kC));  // 4 bytes of a 4096-byte buffer
  // copy with incy 2 leaves every other element of y: read as well.
  l.pointer_mode = CUBLAS_POINTER_MODE_HOST;
  l.n = 512, l.incy = 2;
  s = sets_of(ipc::BlasLevel1::kCopy);
  EXPECT_TRUE(ReadWrite(s, kB));
}

TEST_F(SpeculationTest, BatchedGemmAndGemvExtents) {
  // Two 16 x 16 fp32 matrices, 256 elements apart: one dense 2 KiB run, half of buffer C.
  OperandRange c = MatrixRange(kC, 16, 16, 16, 4, 2, 256);
  EXPECT_EQ(c.bytes, 2048u);
  EXPECT_TRUE(c.dense);
  EXPECT_FALSE(MatrixRange(kC, 16, 16, 16, 4, 2, 512).dense);
  EXPECT_EQ(MatrixRange(kC, 0, 16, 16, 4).bytes, 0u);
  // y = A x with y = all of buffer C (1024 floats, incy 1), beta 0: write-only; incy 2: not dense.
  ipc::BlasLevel2Args v{};
  v.routine = static_cast<int32_t>(ipc::BlasLevel2::kGemv);
  v.type = CUDA_R_32F;
  v.trans = CUBLAS_OP_N;
  v.m = 1024, v.n = 1, v.lda = 1024, v.incx = 1, v.incy = 1;
  v.a = kA, v.x = kB, v.y = kC;
  SpeculateBlas(table_, Level2Operands(v), &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_TRUE(ReadOnly(sets_, kB));
  EXPECT_TRUE(WriteOnly(sets_, kC));
  sets_.Clear();
  v.m = 512, v.lda = 512, v.incy = 2;
  SpeculateBlas(table_, Level2Operands(v), &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kC));
  EXPECT_EQ(VectorRange(kB, 4, -3, 4).bytes, 40u);
  // A negative batch stride: the last matrix is the lowest, 2 KiB below the first.
  const OperandRange down = MatrixRange(kC + 2048, 16, 16, 16, 4, 2, -512);
  EXPECT_EQ(down.ptr, kC);
  EXPECT_EQ(down.bytes, 3072u);
  EXPECT_FALSE(down.dense);
  // An increment of 0 names one element, read n times.
  EXPECT_EQ(VectorRange(kB, 4, 0, 4).bytes, 4u);
}

TEST_F(SpeculationTest, ExtentsThatWrapNameEveryBufferFromTheirPointer) {
  // A batch stride whose product overflows, a negative stride reaching below address 0, a vector
  // increment of INT64_MIN: the span is unbounded (never a wrapped small one) and not dense.
  for (OperandRange r : {MatrixRange(kA, 16, 16, 16, 4, 3, INT64_MAX), MatrixRange(kA, 16, 16, 16, 4, 2, INT64_MIN / 8),
                         MatrixRange(kA, 2, INT64_MAX, INT64_MAX, 4), VectorRange(kA, 3, INT64_MIN, 4),
                         VectorRange(kA, INT64_MAX, 2, 8)}) {
    EXPECT_EQ(r.ptr, kA);
    EXPECT_EQ(r.bytes, UINT64_MAX);
    EXPECT_FALSE(r.dense);
  }
  // Such an operand reaches every buffer at or past its pointer.
  ipc::GemmArgs g = Gemm32(kA, kA, kA, 0.0f);
  g.m = g.n = g.k = 16, g.lda = g.ldb = g.ldc = 16;
  g.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kStrided);
  g.batch = 3;
  g.stride_a = g.stride_b = g.stride_c = INT64_MAX;
  SpeculateBlas(table_, GemmOperands(g), &sets_);
  EXPECT_TRUE(sets_.write.Contains(kA));
  EXPECT_TRUE(sets_.write.Contains(kB));
  EXPECT_TRUE(sets_.write.Contains(kC));
}

// NCCL calls: a rank's send buffer is read, its receive buffer written (read too where the call
// does not cover it), each over the bytes this rank's part of the call touches.
TEST_F(SpeculationTest, NcclCollectiveOperandsAreThisRanksPart) {
  constexpr int kRanks = 4;
  constexpr uint64_t kCount = kBytes / 4 / kRanks;  // fp32: a quarter of a buffer
  auto args = [](ipc::NcclCollectiveKind kind, uint64_t count, int root) {
    return ipc::NcclCollectiveArgs{.comm = 16, .stream = 0, .send = kA, .recv = kB, .count = count,
                                   .kind = static_cast<int32_t>(kind), .datatype = 7, .op = 0, .root = root};
  };
  // An all-gather receives every rank's count: the whole of B, which it overwrites.
  NcclOperands gather = NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kAllGather, kCount, 0), 4, kRanks, 1);
  EXPECT_EQ(gather.send.bytes, kCount * 4);
  EXPECT_EQ(gather.recv.bytes, kBytes);
  SpeculateNccl(table_, gather, &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_TRUE(WriteOnly(sets_, kB));
  // A reduce-scatter sends every rank's count and receives one: B is written in part.
  sets_.Clear();
  NcclOperands scatter =
      NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kReduceScatter, kCount, 0), 4, kRanks, 1);
  EXPECT_EQ(scatter.send.bytes, kBytes);
  EXPECT_EQ(scatter.recv.bytes, kCount * 4);
  SpeculateNccl(table_, scatter, &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kB));
  // A broadcast reads the root's send buffer only; a reduce writes the root's receive buffer only.
  EXPECT_EQ(NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kBroadcast, kCount, 2), 4, kRanks, 1).send.bytes, 0u);
  EXPECT_EQ(NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kBroadcast, kCount, 1), 4, kRanks, 1).send.bytes,
            kCount * 4);
  sets_.Clear();
  NcclOperands reduce = NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kReduce, kCount, 0), 4, kRanks, 1);
  EXPECT_EQ(reduce.recv.bytes, 0u);
  SpeculateNccl(table_, reduce, &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kA));
  EXPECT_FALSE(sets_.read.Contains(kB) || sets_.write.Contains(kB));
  // A pre-multiplied sum's device scalar is read.
  sets_.Clear();
  NcclOperands scaled = NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kAllReduce, kCount, 0), 4, kRanks, 0);
  scaled.scalar = {kC + 8, 4, true};
  SpeculateNccl(table_, scaled, &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kC));
  // A count whose bytes wrap reaches every buffer from the pointers up.
  sets_.Clear();
  NcclOperands wrapped =
      NcclCollectiveOperands(args(ipc::NcclCollectiveKind::kAllGather, UINT64_MAX / 8, 0), 4, kRanks, 0);
  EXPECT_TRUE(wrapped.overflow);
  SpeculateNccl(table_, wrapped, &sets_);
  EXPECT_TRUE(sets_.write.Contains(kB) && sets_.write.Contains(kC));
}

TEST_F(SpeculationTest, NcclSendsReadAndReceivesWrite) {
  const ipc::NcclP2pArgs whole{.comm = 16, .stream = 0, .buffer = kB, .count = kBytes / 8, .datatype = 8, .peer = 1};
  SpeculateNccl(table_, NcclPointToPointOperands(whole, /*send=*/true, 8), &sets_);
  EXPECT_TRUE(ReadOnly(sets_, kB));
  sets_.Clear();
  SpeculateNccl(table_, NcclPointToPointOperands(whole, /*send=*/false, 8), &sets_);
  EXPECT_TRUE(WriteOnly(sets_, kB));
  sets_.Clear();
  const ipc::NcclP2pArgs part{.comm = 16, .stream = 0, .buffer = kC + 64, .count = 16, .datatype = 7, .peer = 1};
  SpeculateNccl(table_, NcclPointToPointOperands(part, /*send=*/false, 4), &sets_);
  EXPECT_TRUE(ReadWrite(sets_, kC));
  const ipc::NcclP2pArgs wraps{.comm = 16, .stream = 0, .buffer = kA, .count = UINT64_MAX, .datatype = 7, .peer = 1};
  EXPECT_TRUE(NcclPointToPointOperands(wraps, true, 4).overflow);
}

#ifdef PHOS_SPECULATION_TEST_MODULE
TEST(ParamMetadataCacheTest, LayoutComesFromTheDriverTable) {
  auto driver = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  driver::DriverTable& d = **driver;
  ASSERT_EQ(d.cuInit(0), CUDA_SUCCESS);
  CUdevice dev;
  ASSERT_EQ(d.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  CUcontext ctx;
  ASSERT_EQ(d.cuCtxCreate(&ctx, nullptr, 0, dev), CUDA_SUCCESS);
  std::ifstream in(PHOS_SPECULATION_TEST_MODULE, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(image.empty()) << PHOS_SPECULATION_TEST_MODULE;
  CUmodule module;
  ASSERT_EQ(d.cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
  CUfunction fn;
  ASSERT_EQ(d.cuModuleGetFunction(&fn, module, "_Z12mixed_paramscdiPd4Vec39Aligned16"), CUDA_SUCCESS);
  ParamMetadataCache cache;
  auto meta = cache.GetOrQuery({9, 9}, "_Z12mixed_paramscdiPd4Vec39Aligned16", d, fn);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  ASSERT_EQ((*meta)->params.size(), 6u);
  EXPECT_EQ((*meta)->params[3].offset, 24u);
  EXPECT_EQ((*meta)->params[3].access, RW);
  EXPECT_EQ((*meta)->params[5].size, 16u);
  EXPECT_EQ((*meta)->param_bytes, 64u);
  // A kernel with more parameters than the caller allows is refused.
  auto capped = QueryParamLayout(d, fn, 2);
  ASSERT_FALSE(capped.ok());
  EXPECT_NE(capped.status().message().find("more than 2 parameters"), std::string::npos)
      << capped.status().message();
  // The second query is a hit and never touches the driver.
  auto again = cache.GetOrQuery({9, 9}, "_Z12mixed_paramscdiPd4Vec39Aligned16", d, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), meta->get());
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(d.cuModuleUnload(module), CUDA_SUCCESS);
  EXPECT_EQ(d.cuCtxDestroy(ctx), CUDA_SUCCESS);
}
#endif

}  // namespace
}  // namespace phos::runtime
