// Prints what NCCL answers without a GPU or a session: its version, ncclGetErrorString of every
// ncclResult_t and of values that are none, the thread's last error before any failure, and the
// results of calls refused or served before a communicator is reached. Built against NVIDIA's
// libnccl, frontend_test runs it with NVIDIA's library and with phos's in its place and compares.
#include <nccl.h>

#include <climits>
#include <cstdio>
#include <initializer_list>

int main() {
  std::printf("ncclGetLastError before any failure\t[%s]\n", ncclGetLastError(nullptr));
  int version = 0;
  const ncclResult_t got = ncclGetVersion(&version);
  std::printf("ncclGetVersion\t%d\t%d\n", got, version);
  std::printf("ncclGetVersion(NULL)\t%d\n", ncclGetVersion(nullptr));
  for (int value : {INT_MIN, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, INT_MAX}) {
    std::printf("%d\t%s\n", value, ncclGetErrorString(static_cast<ncclResult_t>(value)));
  }
  int n = 0;
  void* handle = nullptr;
  std::printf("ncclCommDestroy(NULL)\t%d\n", ncclCommDestroy(nullptr));
  std::printf("ncclCommAbort(NULL)\t%d\n", ncclCommAbort(nullptr));
  std::printf("ncclCommFinalize(NULL)\t%d\n", ncclCommFinalize(nullptr));
  std::printf("ncclCommCount(NULL)\t%d\n", ncclCommCount(nullptr, &n));
  std::printf("ncclCommUserRank(NULL)\t%d\n", ncclCommUserRank(nullptr, &n));
  std::printf("ncclCommCuDevice(NULL)\t%d\n", ncclCommCuDevice(nullptr, &n));
  std::printf("ncclCommRegister(NULL)\t%d\n", ncclCommRegister(nullptr, &n, sizeof(n), &handle));
  std::printf("ncclGroupEnd without ncclGroupStart\t%d\n", ncclGroupEnd());
  return 0;
}
