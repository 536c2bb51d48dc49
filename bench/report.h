// Writes a benchmark's results into docs/benchmarks.md, between markers of its own, so every
// benchmark owns one section and a rerun replaces it.
#pragma once

#include <string>

namespace phos::bench {

// Replaces (or appends) the section `name` of `path` with `markdown`. Returns false and prints
// why when the file cannot be written.
bool WriteSection(const std::string& path, const std::string& name, const std::string& markdown);

// "2026-11-21 23:59 UTC"
std::string NowUtc();

// The command line as typed, for the report.
std::string CommandLine(int argc, char** argv);

// The host's shared-memory transparent huge page mode
// (/sys/kernel/mm/transparent_hugepage/shmem_enabled: "never", "advise", ...; "unknown" when
// unreadable). simgpu's device memory is shared memory: with "never", a fresh mapping of weights
// faults in 4 KiB at a time on the host, a cost a GPU does not have.
std::string HostShmemHugePages();
// Says on standard error, naming `program`, when HostShmemHugePages() is "never", and how to change it.
void WarnIfNoShmemHugePages(const char* program);

}  // namespace phos::bench
