// The crash-consistency workload, shared by the writer process the tests kill and by the
// checks run after each kill: small snapshots whose bytes can be regenerated from their labels.
#pragma once

#include <cstdint>
#include <string>

#include "phos/store/store.h"

namespace phos::store::testing {

inline constexpr uint32_t kCrashChunkBytes = 4096;

StoreOptions CrashStoreOptions(const std::string& dir);
// Loops forever over random commits, deletions, GC and compaction (until killed).
int RunCrashWriter(const std::string& dir, uint64_t seed);
// Opens the store and checks it: consistent refcounts, every snapshot verifies and holds exactly
// the buffers and bytes its writer gave it. Also returns the number of snapshots seen.
Status CheckCrashStore(const std::string& dir, int* snapshots);

}  // namespace phos::store::testing
