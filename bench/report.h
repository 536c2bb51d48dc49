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

}  // namespace phos::bench
