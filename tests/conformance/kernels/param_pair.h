// A by-value struct parameter of mixed_params (param_kernels.cuh), shared with the host tests
// that pass it. 8 bytes, 4-byte aligned: phos's speculation tries every 8-byte word of such
// parameters as an address (docs/design.md D8), so its layout has to be the one the driver reports.
#pragma once

struct ParamPair {
  int a;
  float b;
};
