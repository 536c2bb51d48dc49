// A CUDA program as its users write one (the toolkit's headers, NVIDIA's libcudart, nothing of
// phos) exercising the launch family: a kernel's attributes, occupancy worked out here from the
// device's properties and the kernel's attributes and held against the runtime's, the block size
// cudaOccupancyMaxPotentialBlockSize picks, dynamic shared memory past the default limit once
// opted in, a launch with launch attributes, and module globals: a __constant__ table set with
// cudaMemcpyToSymbol that the kernel reads, and a __device__ counter it writes, read back with
// cudaMemcpyFromSymbol. Every result is checked against a CPU computation; it exits 0 only when
// every check held. transparency_test runs it under `phos-fn run`.
//
// Built with g++ (the host code of its kernels compiled alongside, their simgpu module embedded)
// for simgpu, and with nvcc compiling the kernels for a GPU: the cuda_runtime.h templates that
// only nvcc's compilation sees are not used, so symbols and kernels are passed by address.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

// launch_kernels.cu's kernel (the stub nvcc generates, or the host side of the g++ build) and its
// variables: float coefficients[16] in constant memory, unsigned long long evaluated in global
// memory, by their host shadows' addresses.
void evaluate_polynomial(const float* x, float* y, int n);
const void* coefficients_symbol();
const void* evaluated_symbol();

namespace {

int g_failures = 0;

#define CHECK(cond)                                                \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::printf("CHECK FAILED: line %d: %s\n", __LINE__, #cond); \
      ++g_failures;                                                \
    }                                                              \
  } while (0)
#define OK(call) CHECK((call) == cudaSuccess)

const void* const kKernel = reinterpret_cast<const void*>(&evaluate_polynomial);

int RoundUp(int x, int to) {
  return (x + to - 1) / to * to;
}

// Blocks of `block` threads with `dynamic` bytes of dynamic shared memory that fit on one SM, by
// the rules NVIDIA documents for its occupancy calculator on compute capability 7.0 and later: a
// block takes its warps, its registers (per warp, in 256-register units, from the SM's four
// sub-partitions) and its shared memory (static, dynamic and the per-block reserve, in 128-byte
// units); the SM holds as many blocks as the scarcest of them, and of blocks, allows.
int BlocksPerSm(const cudaDeviceProp& p, const cudaFuncAttributes& a, int block, size_t dynamic) {
  const int warps = (block + p.warpSize - 1) / p.warpSize;
  int blocks = p.maxBlocksPerMultiProcessor;
  blocks = std::min(blocks, p.maxThreadsPerMultiProcessor / p.warpSize / warps);
  if (a.numRegs > 0) {
    const int regs_per_warp = RoundUp(a.numRegs * p.warpSize, 256);
    const int sub_partitions = 4;
    if (regs_per_warp * RoundUp(warps, sub_partitions) > p.regsPerBlock) return 0;
    const int warps_per_sub_partition = p.regsPerMultiprocessor / sub_partitions / regs_per_warp;
    blocks = std::min(blocks, warps_per_sub_partition * sub_partitions / warps);
  }
  if (dynamic > static_cast<size_t>(a.maxDynamicSharedSizeBytes)) return 0;
  const size_t shared = static_cast<size_t>(
      RoundUp(static_cast<int>(a.sharedSizeBytes + dynamic + p.reservedSharedMemPerBlock), 128));
  if (shared > p.sharedMemPerBlockOptin + p.reservedSharedMemPerBlock) return 0;
  blocks = std::min(blocks, static_cast<int>(p.sharedMemPerMultiprocessor / shared));
  return blocks;
}

// y on the CPU, by the kernel's own scheme.
float Polynomial(const float (&c)[16], float x) {
  float acc = 0.0f;
  for (int k = 15; k >= 0; --k) acc = acc * x + c[k];
  return acc;
}

// The kernel over n points of x; the values it wrote, compared with the CPU's (a GPU may fuse
// each multiply-add, so the last bits may differ).
bool Evaluate(const std::vector<float>& x, const float (&c)[16], size_t shared, cudaStream_t stream) {
  const int n = static_cast<int>(x.size());
  float *dx = nullptr, *dy = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&dx), n * sizeof(float)));
  OK(cudaMalloc(reinterpret_cast<void**>(&dy), n * sizeof(float)));
  OK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  int count = n;
  void* args[] = {&dx, &dy, &count};
  OK(cudaLaunchKernel(kKernel, dim3((n + 127) / 128), dim3(128), args, shared, stream));
  std::vector<float> y(n, -1.0f);
  OK(cudaMemcpyAsync(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  OK(cudaStreamSynchronize(stream));
  OK(cudaFree(dx));
  OK(cudaFree(dy));
  bool close = true;
  for (int i = 0; i < n; ++i) {
    const float want = Polynomial(c, x[i]);
    close &= std::fabs(y[i] - want) <= 1e-5f * (1.0f + std::fabs(want));
  }
  return close;
}

}  // namespace

int main() {
  int device = 0;
  OK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  OK(cudaGetDeviceProperties(&prop, device));

  // The kernel's attributes, within the device's limits.
  cudaFuncAttributes attr{};
  OK(cudaFuncGetAttributes(&attr, kKernel));
  std::printf(
      "attributes: %d threads per block, %d registers, %zu static shared, %zu constant, %zu local bytes, "
      "PTX %d, binary %d, %d dynamic shared bytes, carveout %d\n",
      attr.maxThreadsPerBlock, attr.numRegs, attr.sharedSizeBytes, attr.constSizeBytes, attr.localSizeBytes,
      attr.ptxVersion, attr.binaryVersion, attr.maxDynamicSharedSizeBytes, attr.preferredShmemCarveout);
  CHECK(attr.maxThreadsPerBlock > 0 && attr.maxThreadsPerBlock <= prop.maxThreadsPerBlock);
  CHECK(attr.numRegs > 0 && attr.numRegs <= 255);
  CHECK(attr.binaryVersion / 10 == prop.major && attr.binaryVersion <= prop.major * 10 + prop.minor);
  CHECK(attr.constSizeBytes >= 16 * sizeof(float));
  CHECK(static_cast<size_t>(attr.maxDynamicSharedSizeBytes) == prop.sharedMemPerBlock - attr.sharedSizeBytes);

  // Occupancy: the runtime's answer and this program's own, for block sizes and shared memory
  // that make warps, registers, shared memory and blocks the limit in turn.
  int compared = 0;
  for (int block : {32, 64, 96, 128, 256, 384, 512, 1024}) {
    if (block > attr.maxThreadsPerBlock) continue;  // a register-heavy kernel may not take it
    for (size_t dynamic : {size_t{0}, size_t{1000}, size_t{20000}, size_t{40000}}) {
      int blocks = -1;
      OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, block, dynamic));
      const int mine = BlocksPerSm(prop, attr, block, dynamic);
      if (blocks != mine)
        std::printf("  %d threads, %zu bytes: runtime %d, by hand %d\n", block, dynamic, blocks, mine);
      CHECK(blocks == mine);
      ++compared;
    }
  }
  // The block size the runtime's template suggests is the one that, tried from the largest down,
  // first reaches the most threads per SM; its grid fills every SM.
  int min_grid = 0, suggested = 0;
  OK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &suggested, kKernel));
  int best_block = 0, best_threads = 0;
  for (int block = std::min(attr.maxThreadsPerBlock, prop.maxThreadsPerBlock); block > 0;
       block -= prop.warpSize) {
    const int threads = BlocksPerSm(prop, attr, block, 0) * block;
    if (threads > best_threads) {
      best_threads = threads;
      best_block = block;
    }
  }
  std::printf("occupancy: %d cases agree; suggested block %d (grid %d), by hand %d\n", compared, suggested,
              min_grid, best_block);
  CHECK(suggested == best_block && min_grid == best_threads / best_block * prop.multiProcessorCount);

  // Dynamic shared memory past the default limit: refused until the kernel opts in, then the
  // limit is the device's opt-in figure and two blocks per SM may share what the SM has.
  const size_t big = prop.sharedMemPerBlock + 4096;
  CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(prop.sharedMemPerBlockOptin) + 1) == cudaErrorInvalidValue);
  OK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(prop.sharedMemPerBlockOptin)));
  OK(cudaFuncGetAttributes(&attr, kKernel));
  CHECK(static_cast<size_t>(attr.maxDynamicSharedSizeBytes) == prop.sharedMemPerBlockOptin);
  size_t available = 0;
  OK(cudaOccupancyAvailableDynamicSMemPerBlock(&available, kKernel, 2, 128));
  CHECK(available == std::min(prop.sharedMemPerMultiprocessor / 2 / 128 * 128, prop.sharedMemPerBlockOptin) -
                         attr.sharedSizeBytes);

  // Module globals: the table set here, the kernel's count read back.
  float c[16];
  for (int k = 0; k < 16; ++k) c[k] = (k % 2 == 0 ? 1.0f : -1.0f) / static_cast<float>(k + 1);
  OK(cudaMemcpyToSymbol(coefficients_symbol(), c, sizeof(c)));
  size_t table_bytes = 0;
  OK(cudaGetSymbolSize(&table_bytes, coefficients_symbol()));
  CHECK(table_bytes == sizeof(c));
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) / 500.0f - 1.0f;
  cudaStream_t stream = nullptr;
  OK(cudaStreamCreate(&stream));
  CHECK(Evaluate(x, c, 0, stream));
  CHECK(Evaluate(std::vector<float>(x.begin(), x.begin() + 300), c, big, stream));
  unsigned long long count = 0;
  OK(cudaMemcpyFromSymbol(&count, evaluated_symbol(), sizeof(count)));
  CHECK(count == 1300);

  // A launch with launch attributes: the completion event, a priority and an ignored entry; the
  // table changed half-way through is what the kernel reads.
  c[3] = 2.5f;
  OK(cudaMemcpyToSymbolAsync(coefficients_symbol(), &c[3], sizeof(float), 3 * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  float *dx = nullptr, *dy = nullptr;
  const int n = 512;
  OK(cudaMalloc(reinterpret_cast<void**>(&dx), n * sizeof(float)));
  OK(cudaMalloc(reinterpret_cast<void**>(&dy), n * sizeof(float)));
  OK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t launched = nullptr;
  OK(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
  cudaLaunchAttribute attrs[3];
  std::memset(attrs, 0, sizeof(attrs));
  attrs[0].id = cudaLaunchAttributeLaunchCompletionEvent;
  attrs[0].val.launchCompletionEvent.event = launched;
  attrs[1].id = cudaLaunchAttributePriority;
  attrs[1].val.priority = 0;
  attrs[2].id = cudaLaunchAttributeIgnore;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(n / 128);
  config.blockDim = dim3(128);
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 3;
  int count_arg = n;
  void* args[] = {&dx, &dy, &count_arg};
  OK(cudaLaunchKernelExC(&config, kKernel, args));
  OK(cudaEventSynchronize(launched));
  std::vector<float> y(n);
  OK(cudaMemcpyAsync(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  OK(cudaStreamSynchronize(stream));
  bool close = true;
  for (int i = 0; i < n; ++i)
    close &= std::fabs(y[i] - Polynomial(c, x[i])) <= 1e-5f * (1.0f + std::fabs(y[i]));
  CHECK(close);
  void* counter = nullptr;
  OK(cudaGetSymbolAddress(&counter, evaluated_symbol()));
  OK(cudaMemcpy(&count, counter, sizeof(count), cudaMemcpyDefault));
  CHECK(count == 1300 + n);

  OK(cudaEventDestroy(launched));
  OK(cudaStreamDestroy(stream));
  OK(cudaFree(dx));
  OK(cudaFree(dy));
  std::printf("launch report: %d registers, suggested block %d, %llu points evaluated, %s\n", attr.numRegs,
              suggested, count, g_failures == 0 ? "all checks held" : "checks failed");
  return g_failures == 0 ? 0 : 1;
}
