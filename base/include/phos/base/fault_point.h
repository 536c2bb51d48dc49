// Fault points: named places in deploy, restore and garbage collection where a test can make phosd
// stop dead, so that it kills phosd (kill -9) exactly there rather than after a guessed delay.
//
// With PHOS_FAULT_PAUSE_AT=<name> in the environment, the first thread to reach FaultPoint(<name>)
// logs "paused at fault point '<name>'" and blocks until the process is killed; other threads go
// on. Builds without PHOS_FAULT_POINTS (PHOS_BUILD_TESTS=OFF) compile every point to nothing.
#pragma once

#include <string_view>

namespace phos {

#ifdef PHOS_FAULT_POINTS
void FaultPoint(std::string_view name);
#else
inline void FaultPoint(std::string_view) {}
#endif

}  // namespace phos
