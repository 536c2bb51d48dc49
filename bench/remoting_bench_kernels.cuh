// The remoting benchmark's kernel: it does nothing, so a launch measures the call path only.
#pragma once

#include "phos/kernel.h"

PHOS_GLOBAL void bench_empty_kernel() {}
PHOS_EXPORT_KERNEL(bench_empty_kernel);
