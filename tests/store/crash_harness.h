#pragma once

namespace phos::store::testing {

// Starts the crash writer `iterations` times on one store, SIGKILLs it at a random moment
// (during commits, deletions, GC or compaction), and checks the store after each kill.
void RunCrashIterations(int iterations, unsigned seed);

}  // namespace phos::store::testing
