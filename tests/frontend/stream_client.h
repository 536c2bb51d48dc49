// What the stream client's two translation units share: stream_client.cc (built as usual) and
// stream_client_ptds.cc (built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM, so its calls are the
// _ptds / _ptsz entry points).
#pragma once

#include <atomic>
#include <cstdio>

namespace phos::stream_client {

inline int g_failures = 0;

#define EXPECT(cond)                                                                              \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "stream_client:%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++::phos::stream_client::g_failures;                                                        \
    }                                                                                             \
  } while (0)

#define OK(call) EXPECT((call) == cudaSuccess)

// A host function's hook: it says it started, then waits until the test lets it return. Whatever
// its stream queued after it cannot have run while it waits.
struct Gate {
  std::atomic<bool> started{false};
  std::atomic<bool> open{false};
};

// cudaHostFn_t over a Gate.
void WaitAtGate(void* gate);
// Spins until `gate` started; false after a minute (the function was never called).
bool AwaitStarted(const Gate& gate);

// stream_client_ptds.cc: two threads use the default stream, each its own.
int PerThreadDefaultStreams();

}  // namespace phos::stream_client
