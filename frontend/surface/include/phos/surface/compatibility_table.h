// docs/compatibility.md: per library, how many of NVIDIA's functions phos serves, refuses and
// lacks, then every function with its state. Made from a Surface only (`phos-fn check --table`,
// run by scripts/compatibility.sh), so the doc says what the built libraries export.
#pragma once

#include <string>

#include "phos/surface/surface.h"

namespace phos::surface {

// The whole of docs/compatibility.md (Markdown).
std::string CompatibilityTable(const Surface& surface);

}  // namespace phos::surface
