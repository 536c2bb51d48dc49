// A plain NCCL program that knows nothing of phos: one communicator over every device it sees
// (ncclCommInitAll), then an all-to-all of sends and receives in one group, the same through
// ncclAlltoAll, a reduce to the last rank, an in-place all-reduce and a pre-multiplied sum, each
// checked against the same computation on the CPU here; the communicators' queries and
// asynchronous errors, configurations NCCL accepts and refuses, and finalize before destroy.
// Prints what it checked; any mismatch prints "CHECK FAILED" and the program exits 1.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

int failures = 0;

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      std::printf("CHECK FAILED %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                                \
      std::printf("\n");                                       \
      ++failures;                                              \
    }                                                          \
  } while (0)

#define CUDA_OK(call)                                                        \
  do {                                                                       \
    const cudaError_t cuda_result_ = (call);                                 \
    if (cuda_result_ != cudaSuccess) {                                       \
      std::printf("CHECK FAILED %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                  cudaGetErrorString(cuda_result_));                         \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

#define NCCL_OK(call)                                                             \
  do {                                                                            \
    const ncclResult_t nccl_result_ = (call);                                     \
    if (nccl_result_ != ncclSuccess) {                                            \
      std::printf("CHECK FAILED %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, \
                  ncclGetErrorString(nccl_result_), ncclGetLastError(nullptr));   \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

constexpr size_t kCount = 1000;  // elements each rank sends each peer

// Rank r's value for peer p at element i: distinct for up to 100 ranks, and the sums and
// products below stay under 2^24, exact in fp32 whatever order the ranks are summed in.
float Value(int r, int p, size_t i) {
  return static_cast<float>(r * 10000 + p * 100 + static_cast<int>(i % 97));
}

struct Rank {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* send = nullptr;  // n * kCount: slice p for peer p
  float* recv = nullptr;  // n * kCount
};

std::vector<float> Download(int device, const float* src, size_t count) {
  std::vector<float> out(count);
  CUDA_OK(cudaSetDevice(device));
  CUDA_OK(cudaMemcpy(out.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

void SyncAll(std::vector<Rank>& ranks) {
  for (size_t d = 0; d < ranks.size(); ++d) {
    CUDA_OK(cudaSetDevice(static_cast<int>(d)));
    CUDA_OK(cudaStreamSynchronize(ranks[d].stream));
  }
}

// What rank r holds after an all-to-all: slice p is what p sent to r.
void CheckAllToAll(std::vector<Rank>& ranks, const char* how) {
  const int n = static_cast<int>(ranks.size());
  for (int r = 0; r < n; ++r) {
    std::vector<float> got = Download(r, ranks[r].recv, n * kCount);
    int wrong = 0;
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < kCount; ++i) wrong += got[p * kCount + i] != Value(p, r, i);
    }
    CHECK(wrong == 0, "%s: rank %d received %d wrong elements", how, r, wrong);
  }
}

void Clear(std::vector<Rank>& ranks) {
  for (size_t d = 0; d < ranks.size(); ++d) {
    CUDA_OK(cudaSetDevice(static_cast<int>(d)));
    CUDA_OK(cudaMemset(ranks[d].recv, 0, ranks.size() * kCount * sizeof(float)));
    CUDA_OK(cudaDeviceSynchronize());
  }
}

void CheckConfigs(int device) {
  CUDA_OK(cudaSetDevice(device));
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument,
        "a config without its magic");
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument, "blocking 2");
  config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 8;
  config.maxCTAs = 4;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument, "minCTAs above maxCTAs");
  CHECK(comm == nullptr, "a refused config left a communicator");
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.cgaClusterSize = 2;
  config.minCTAs = 1;
  config.maxCTAs = 8;
  NCCL_OK(ncclCommInitRankConfig(&comm, 1, id, 0, &config));
  int count = 0, rank = -1;
  NCCL_OK(ncclCommCount(comm, &count));
  NCCL_OK(ncclCommUserRank(comm, &rank));
  CHECK(count == 1 && rank == 0, "a one-rank communicator is %d ranks, rank %d", count, rank);
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  std::printf("configurations: 3 refused, 1 accepted\n");
}

}  // namespace

int main() {
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  CHECK(version >= NCCL_VERSION(2, 28, 0), "version %d", version);
  for (int r = ncclSuccess; r < ncclNumResults; ++r) {
    const char* text = ncclGetErrorString(static_cast<ncclResult_t>(r));
    CHECK(text != nullptr && text[0] != '\0', "no text for result %d", r);
  }
  int n = 0;
  CUDA_OK(cudaGetDeviceCount(&n));
  CHECK(n >= 2, "%d devices: an all-to-all needs two", n);
  if (n < 2) return 1;
  std::vector<Rank> ranks(n);
  std::vector<ncclComm_t> comms(n);
  NCCL_OK(ncclCommInitAll(comms.data(), n, nullptr));
  for (int d = 0; d < n; ++d) {
    Rank& rank = ranks[d];
    rank.comm = comms[d];
    int count = 0, user_rank = -1, device = -1;
    NCCL_OK(ncclCommCount(rank.comm, &count));
    NCCL_OK(ncclCommUserRank(rank.comm, &user_rank));
    NCCL_OK(ncclCommCuDevice(rank.comm, &device));
    CHECK(count == n && user_rank == d && device == d, "rank %d: count %d, rank %d, device %d", d, count,
          user_rank, device);
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaStreamCreate(&rank.stream));
    CUDA_OK(cudaMalloc(&rank.send, n * kCount * sizeof(float)));
    CUDA_OK(cudaMalloc(&rank.recv, n * kCount * sizeof(float)));
    std::vector<float> in(n * kCount);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < kCount; ++i) in[p * kCount + i] = Value(d, p, i);
    }
    CUDA_OK(cudaMemcpy(rank.send, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  Clear(ranks);

  // All-to-all of sends and receives: every rank's in one group.
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      NCCL_OK(ncclSend(ranks[r].send + p * kCount, kCount, ncclFloat, p, ranks[r].comm, ranks[r].stream));
      NCCL_OK(ncclRecv(ranks[r].recv + p * kCount, kCount, ncclFloat, p, ranks[r].comm, ranks[r].stream));
    }
  }
  NCCL_OK(ncclGroupEnd());
  SyncAll(ranks);
  CheckAllToAll(ranks, "sends and receives");

  // The same through ncclAlltoAll.
  Clear(ranks);
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    NCCL_OK(ncclAlltoAll(ranks[r].send, ranks[r].recv, kCount, ncclFloat, ranks[r].comm, ranks[r].stream));
  }
  NCCL_OK(ncclGroupEnd());
  SyncAll(ranks);
  CheckAllToAll(ranks, "ncclAlltoAll");

  // Reduce (sum) of every rank's first slice to the last rank; the others pass no receive buffer.
  const int root = n - 1;
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    NCCL_OK(ncclReduce(ranks[r].send, r == root ? ranks[r].recv : nullptr, kCount, ncclFloat, ncclSum, root,
                       ranks[r].comm, ranks[r].stream));
  }
  NCCL_OK(ncclGroupEnd());
  SyncAll(ranks);
  {
    std::vector<float> got = Download(root, ranks[root].recv, kCount);
    int wrong = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += Value(r, 0, i);
      wrong += got[i] != want;
    }
    CHECK(wrong == 0, "reduce: %d wrong elements at the root", wrong);
  }

  // In-place all-reduce (max) of each rank's second slice.
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    float* slice = ranks[r].send + kCount;
    NCCL_OK(ncclAllReduce(slice, slice, kCount, ncclFloat, ncclMax, ranks[r].comm, ranks[r].stream));
  }
  NCCL_OK(ncclGroupEnd());
  SyncAll(ranks);
  for (int r = 0; r < n; ++r) {
    std::vector<float> got = Download(r, ranks[r].send + kCount, kCount);
    int wrong = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float want = Value(0, 1, i);
      for (int s = 1; s < n; ++s) want = Value(s, 1, i) > want ? Value(s, 1, i) : want;
      wrong += got[i] != want;
    }
    CHECK(wrong == 0, "all-reduce: rank %d has %d wrong elements", r, wrong);
  }

  // A pre-multiplied sum: rank r's third slice times (r + 1), summed.
  std::vector<ncclRedOp_t> ops(n);
  for (int r = 0; r < n; ++r) {
    float scalar = static_cast<float>(r + 1);
    NCCL_OK(ncclRedOpCreatePreMulSum(&ops[r], &scalar, ncclFloat, ncclScalarHostImmediate, ranks[r].comm));
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    NCCL_OK(ncclAllReduce(ranks[r].send + 2 * kCount, ranks[r].recv, kCount, ncclFloat, ops[r], ranks[r].comm,
                          ranks[r].stream));
  }
  NCCL_OK(ncclGroupEnd());
  SyncAll(ranks);
  for (int r = 0; r < n; ++r) {
    NCCL_OK(ncclRedOpDestroy(ops[r], ranks[r].comm));
    std::vector<float> got = Download(r, ranks[r].recv, kCount);
    int wrong = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0;
      for (int s = 0; s < n; ++s) want += static_cast<float>(s + 1) * Value(s, 2, i);
      wrong += got[i] != want;
    }
    CHECK(wrong == 0, "pre-multiplied sum: rank %d has %d wrong elements", r, wrong);
  }

  for (int r = 0; r < n; ++r) {
    ncclResult_t state = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(ranks[r].comm, &state));
    CHECK(state == ncclSuccess, "rank %d: asynchronous error %d", r, static_cast<int>(state));
  }
  CheckConfigs(0);
  for (int r = 0; r < n; ++r) {
    NCCL_OK(ncclCommFinalize(ranks[r].comm));
    NCCL_OK(ncclCommDestroy(ranks[r].comm));
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaFree(ranks[r].send));
    CUDA_OK(cudaFree(ranks[r].recv));
    CUDA_OK(cudaStreamDestroy(ranks[r].stream));
  }
  if (failures != 0) return 1;
  std::printf("nccl report: %d ranks, all-to-all, reduce, all-reduce, pre-multiplied sum, all checks held\n",
              n);
  return 0;
}
