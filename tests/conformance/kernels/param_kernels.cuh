// A kernel whose parameters mix sizes and alignments, for cuFuncGetParamInfo and for checking
// that every parameter reaches the kernel intact through kernelParams.
#pragma once

#include "param_pair.h"
#include "phos/kernel.h"

// Writes each parameter back, widened to long long, so the host can compare them one by one.
PHOS_GLOBAL void mixed_params(char c, double d, const int* src, short s, float f, ParamPair p, long long ll,
                              long long* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = c;
    out[1] = static_cast<long long>(d);
    out[2] = src[0];
    out[3] = s;
    out[4] = static_cast<long long>(f);
    out[5] = p.a;
    out[6] = static_cast<long long>(p.b);
    out[7] = ll;
  }
}
PHOS_EXPORT_KERNEL(mixed_params);
