// Kernel-parameter speculation (runtime/src/speculation.cc, param_metadata.cc) on hostile
// input: a mangled kernel name and a parameter layout become metadata, then random argument
// buffers, copies, memsets and BLAS operands are speculated against a table of buffers. Every
// buffer a set names must be one of the table's, and no set may hold more than its capacity.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "phos/ipc/wire.h"
#include "phos/runtime/buffer_table.h"
#include "phos/runtime/param_metadata.h"
#include "phos/runtime/speculation.h"

namespace {

using phos::fuzz::FuzzInput;
using namespace phos::runtime;

void CheckSets(const BufferTable& table, const AccessSets& sets) {
  for (const BufferSet* set : {&sets.read, &sets.write}) {
    if (set->size() > BufferSet::kCapacity) std::abort();
    for (const BufferRef& b : set->buffers()) {
      auto it = table.buffers().find(b.base);
      if (it == table.buffers().end() || it->second != b.bytes) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  // The buffers: up to 8, at addresses the input picks (overlaps are refused by the table).
  BufferTable table;
  const unsigned buffers = in.Take<uint8_t>() % 9;
  for (unsigned i = 0; i < buffers; ++i) {
    const uint64_t base = in.Take<uint64_t>();
    const uint64_t bytes = in.Take<uint32_t>();
    (void)table.Insert(base, bytes);
  }

  // The kernel: a mangled name (demangled, split and classified) and its layout.
  const std::string mangled = in.TakeString(200);
  std::vector<ParamSlotLayout> layout(in.Take<uint8_t>() % 17);
  for (ParamSlotLayout& slot : layout) {
    slot.offset = in.Take<uint16_t>();
    slot.size = in.Take<uint8_t>();
  }
  if (auto demangled = Demangle(mangled); demangled.ok()) {
    if (auto types = SplitParameterTypes(*demangled); types.ok()) {
      for (const std::string& type : *types) (void)ParamAccessName(AccessOfType(type));
    }
  }
  const KernelParamMetadata meta = BuildParamMetadata(mangled, layout);
  (void)ParamKindSourceName(meta.source);
  for (const ParamMeta& p : meta.params) (void)ParamAccessName(p.access);

  AccessSets sets;
  const auto params = in.TakeBytes(in.Take<uint16_t>() % 4097);
  if (SpeculateLaunch(meta, params, table, &sets).ok() && params.size() < meta.param_bytes) std::abort();
  CheckSets(table, sets);

  sets.Clear();
  SpeculateCopy(table, in.Take<uint64_t>(), in.Take<uint64_t>(), in.Take<uint64_t>(), &sets);
  SpeculateMemset(table, in.Take<uint64_t>(), in.Take<uint64_t>(), &sets);
  CheckSets(table, sets);

  sets.Clear();
  const auto gemm = in.Take<phos::ipc::GemmArgs>();
  SpeculateBlas(table, GemmOperands(gemm), &sets);
  SpeculateBlas(table, Level1Operands(in.Take<phos::ipc::BlasLevel1Args>()), &sets);
  SpeculateBlas(table, Level2Operands(in.Take<phos::ipc::BlasLevel2Args>()), &sets);
  SpeculateBlas(table, Level3Operands(in.Take<phos::ipc::BlasLevel3Args>()), &sets);
  CheckSets(table, sets);

  // A pointer-array batch: its entries are whatever words the input holds.
  sets.Clear();
  const auto entries = std::min<size_t>(in.Take<uint8_t>(), 64);
  std::vector<uint64_t> a, b, c;
  for (size_t i = 0; i < entries; ++i) {
    a.push_back(in.Take<uint64_t>());
    b.push_back(in.Take<uint64_t>());
    c.push_back(in.Take<uint64_t>());
  }
  SpeculateGemmBatch(table, gemm, a, b, c, &sets);
  CheckSets(table, sets);

  // A cublasLtMatmul record (taken last: the earlier fields of existing seeds keep their meaning).
  sets.Clear();
  SpeculateBlas(table, LtMatmulOperands(in.Take<phos::ipc::BlasLtMatmulArgs>()), &sets);
  CheckSets(table, sets);
  return 0;
}
