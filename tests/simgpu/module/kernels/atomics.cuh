// Atomics from blocks that simgpu runs concurrently on several workers.
#pragma once

#include "phos/kernel.h"

struct AtomicTotals {
  int int_sum;
  unsigned uint_sum;
  unsigned long long ull_sum;
  float float_sum;
  double double_sum;
  int int_max;
  int int_min;
  int cas_count;                   // incremented by an atomicCAS(int) loop
  unsigned long long cas_ull_max;  // maximised by an atomicCAS(unsigned long long) loop
};

// Thread with global index g (of n) contributes g to every total; bins[g % bin_count] += 1.
PHOS_GLOBAL void accumulate(AtomicTotals* t, int* bins, int bin_count, int n) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= n) return;
  atomicAdd(&t->int_sum, g);
  atomicAdd(&t->uint_sum, static_cast<unsigned>(g));
  atomicAdd(&t->ull_sum, static_cast<unsigned long long>(g));
  atomicAdd(&t->float_sum, 1.0f);
  atomicAdd(&t->double_sum, static_cast<double>(g));
  atomicMax(&t->int_max, g);
  atomicMin(&t->int_min, g);
  // CAS loops start from a guess rather than a plain read of the contended word: that read would
  // be a data race in the g++ build (see phos/kernel.h).
  int seen = 0, assumed;
  do {
    assumed = seen;
    seen = atomicCAS(&t->cas_count, assumed, assumed + 1);
  } while (seen != assumed);
  unsigned long long cur = 0, expected;
  const unsigned long long mine = static_cast<unsigned long long>(g) * 3;
  while (cur < mine) {
    expected = cur;
    cur = atomicCAS(&t->cas_ull_max, expected, mine);
    if (cur == expected) break;
  }
  atomicAdd(&bins[g % bin_count], 1);
}
PHOS_EXPORT_KERNEL(accumulate);
