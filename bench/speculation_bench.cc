// Read/write-set speculation per launch (runtime/include/phos/runtime/speculation.h): the cost
// every remoted launch pays while a restored instance still has absent buffers. A table of
// 1,000 buffers (an instance with many small tensors), kernels of 4 and 16 parameters, each
// either all pointers (kinds from the name) or all scanned (extern "C": every word tried).
//
//   build-*/bin/speculation_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "phos/runtime/speculation.h"

namespace {

using phos::runtime::AccessSets;
using phos::runtime::BufferTable;
using phos::runtime::KernelParamMetadata;
using phos::runtime::ParamSlotLayout;

constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kBufferBytes = 1 << 20;  // each 1 MiB, 2 MiB apart: gaps between buffers
constexpr int kBuffers = 1000;

BufferTable MakeTable() {
  BufferTable table;
  for (int i = 0; i < kBuffers; ++i) {
    if (!table.Insert(kBase + 2 * kBufferBytes * i, kBufferBytes).ok()) std::abort();
  }
  return table;
}

// `params` 8-byte parameters; half of them point inside buffers spread over the table (interior
// pointers), the other half hold scalars (a float and a size alternately).
std::vector<uint8_t> MakeParams(int params) {
  std::vector<uint8_t> bytes(8 * params);
  for (int i = 0; i < params; ++i) {
    uint64_t word = i % 2 == 0 ? kBase + 2 * kBufferBytes * ((i * 137) % kBuffers) + 64 * i
                               : (i % 4 == 1 ? uint64_t{0x3f800000} : uint64_t{4096});
    std::memcpy(bytes.data() + 8 * i, &word, 8);
  }
  return bytes;
}

// "_Z1kPKfPf..." alternating const and non-const pointers, or an extern "C" name (all scanned).
KernelParamMetadata MakeMeta(int params, bool typed) {
  std::vector<ParamSlotLayout> layout;
  std::string name = typed ? "_Z1k" : "k";
  for (int i = 0; i < params; ++i) {
    layout.push_back({static_cast<uint32_t>(8 * i), 8});
    if (typed) name += i % 2 == 0 ? "PKf" : "Pf";
  }
  KernelParamMetadata meta = phos::runtime::BuildParamMetadata(name, layout);
  if (typed && meta.source != phos::runtime::ParamKindSource::kDemangled) std::abort();
  return meta;
}

void BM_SpeculateLaunch(benchmark::State& state) {
  const int params = static_cast<int>(state.range(0));
  const bool typed = state.range(1) != 0;
  BufferTable table = MakeTable();
  std::vector<uint8_t> bytes = MakeParams(params);
  KernelParamMetadata meta = MakeMeta(params, typed);
  AccessSets sets;
  for (auto _ : state) {
    sets.Clear();
    phos::Status s = phos::runtime::SpeculateLaunch(meta, bytes, table, &sets);
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(sets);
  }
  state.counters["buffers_named"] = static_cast<double>(sets.read.size());
  state.SetLabel(typed ? "pointer kinds from the name" : "all scanned");
}
BENCHMARK(BM_SpeculateLaunch)->ArgNames({"params", "typed"})->ArgsProduct({{4, 16}, {1, 0}});

void BM_SpeculateCopy(benchmark::State& state) {
  BufferTable table = MakeTable();
  AccessSets sets;
  for (auto _ : state) {
    sets.Clear();
    phos::runtime::SpeculateCopy(table, kBase + 2 * kBufferBytes * 500, kBase + 2 * kBufferBytes * 7 + 128,
                                 4096, &sets);
    benchmark::DoNotOptimize(sets);
  }
}
BENCHMARK(BM_SpeculateCopy);

}  // namespace

BENCHMARK_MAIN();
