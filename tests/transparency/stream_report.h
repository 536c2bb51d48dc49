// What stream_report's two translation units share: stream_report.cc (built as usual) and
// stream_report_ptds.cc (built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM).
#pragma once

#include <cstdio>

extern int g_failures;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::printf("CHECK FAILED: %s line %d: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                             \
    }                                                                           \
  } while (0)
#define OK(call) CHECK((call) == cudaSuccess)

// Two threads each use their default stream (stream 0 of the per-thread entry points).
void PerThreadDefaultStreams();
