// One unit of stream work, as the API layer builds it from a cu* call (an async copy, a memset,
// a kernel launch, a host function), and the engine that runs it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>

namespace phos::sim {

// Each device has one engine of each kind. The two copy engines and the host-function engine are
// single threads (FIFO, one op at a time); kCompute is a pool of workers on which kernels of
// different streams run concurrently, the work of higher-priority streams first; kMemOp runs
// stream memory operations (cuStreamWaitValue32, cuStreamWriteValue32), a wait holding up only
// its own stream.
enum class Engine : uint8_t { kCopyH2D = 0, kCopyD2H, kCompute, kHost, kMemOp };
inline constexpr int kEngineCount = 5;

// "h2d", "d2h", "compute", "host", "memop"; "invalid" for a value outside the enum.
const char* EngineName(Engine engine);

// Stream priorities (cuCtxGetStreamPriorityRange): lower numbers are higher priorities, 0 the
// default. [0, -5] is what NVIDIA's driver answers on compute capability 7.5 and later, A100 and
// H100 included (ExtremeFLOW/neko pull request 830). They order the compute engine's queue only,
// as on the cards, where copies are not affected.
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -5;
inline constexpr int kStreamPriorityLevels = kLeastStreamPriority - kGreatestStreamPriority + 1;

struct Op {
  Engine engine = Engine::kCompute;
  // Modelled device time in device seconds (bytes / the profile's bandwidth, or its launch
  // overhead for a kernel). The engine holds the op until ModelClock::ToWall(cost_seconds) after
  // it started, however quickly the real work finished.
  double cost_seconds = 0;
  // Bytes moved or written; statistics only.
  uint64_t bytes = 0;
  // The work of every op that is not a kernel, run once: a copy, a memset, a host function.
  // May be empty (the op then only takes its modelled time). kMemOp: polled until it answers
  // anything but CUDA_ERROR_NOT_READY (a wait whose condition does not hold yet).
  std::function<CUresult()> work;
  // Kernels (kCompute only; when set, `work` is ignored): called concurrently on several workers
  // with disjoint, contiguous [first, end) ranges that together cover [0, blocks).
  uint64_t blocks = 0;
  std::function<CUresult(uint64_t first, uint64_t end)> run_blocks;
  // What the op is, for guard-fault handlers and logs: a kernel's mangled name (owned by its
  // module, which run_blocks keeps loaded) or a static description. Null: the engine's name.
  const char* what = nullptr;
};

}  // namespace phos::sim
