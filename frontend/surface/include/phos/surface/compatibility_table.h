// docs/compatibility.md: per library, how many of NVIDIA's functions phos serves, refuses and
// lacks, then every function with its state. Made from a Surface only (`phos-fn check --table`,
// run by scripts/compatibility.sh), so the doc says what the built libraries export.
#pragma once

#include <string>

#include "phos/surface/surface.h"

namespace phos::surface {

struct StateCounts {
  size_t served = 0, refused = 0, lacks = 0;
  size_t total() const { return served + refused + lacks; }
};

// The states of NVIDIA's functions of `library`.
StateCounts CountStates(const Surface& surface, size_t library);

// The whole of docs/compatibility.md (Markdown).
std::string CompatibilityTable(const Surface& surface);

}  // namespace phos::surface
