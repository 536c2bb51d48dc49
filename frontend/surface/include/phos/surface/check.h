// "Will my program run?": the CUDA functions a program and the libraries it loads import, each
// with what phos does with it (phos-fn check). The libraries phos stands in for (NVIDIA's
// sonames, which phos's own libraries carry too) are not read: phos's replace them, and their
// functions are what the program's imports are looked up in. Where phos has no library for a
// soname yet, the loader goes on looking, as it would under phos-fn run; NVIDIA's library found
// there is not read either, and the calls it answers do not reach phosd.
//
//   PHOS_ASSIGN_OR_RETURN(Surface surface, Surface::Load(frontend_lib_dir));
//   PHOS_ASSIGN_OR_RETURN(LoaderEnvironment env, LoaderEnvironment::FromProcess());
//   PHOS_ASSIGN_OR_RETURN(CheckReport report, CheckProgram("./my_program", surface, env));
//   std::cout << FormatReport(report, surface);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/surface/library_search.h"
#include "phos/surface/surface.h"

namespace phos::surface {

struct CheckedImport {
  std::string function;
  std::string object;  // the file importing it: the program, or a library it loads
  bool weak = false;
  bool bound_at_load = false;  // ElfImport::bound_at_load, or LD_BIND_NOW
  FunctionState state;
  // When phos has no library for the function's (cuBLASLt, the driver, today): the NVIDIA
  // library the loader finds instead, which answers the call outside phosd; empty otherwise.
  std::string answered_by;
};

enum class Verdict {
  kRuns,           // every import is served
  kCallsFail,      // it loads, and some calls fail (refused, missing and bound lazily, or outside phosd)
  kWillNotLoad,    // a missing function bound at load, or a library not found
  kNotRedirected,  // its CUDA runtime is linked in statically, or is another CUDA version's
};

struct CheckReport {
  std::string program;
  // The files read: the program, then each library it loads, in the loader's order.
  std::vector<std::string> objects;
  // Sorted by library, function and importing file.
  std::vector<CheckedImport> imports;
  // Libraries the loader would not find: "libfoo.so.1 (needed by /path/prog)".
  std::vector<std::string> missing_libraries;
  // Why its CUDA calls cannot be redirected to phosd; empty when they can.
  std::vector<std::string> not_redirected;

  Verdict verdict() const;
};

// Reads `program` and the libraries it loads. An error when `program` itself cannot be read as
// an ELF file; a library that cannot be read is skipped as the loader skips it.
Result<CheckReport> CheckProgram(const std::string& program, const Surface& surface,
                                 const LoaderEnvironment& env);

// The report as phos-fn check prints it: one line per import, then the verdict ("runs",
// "will not load: missing X", "loads; these calls fail: Y", ...) as the last lines.
std::string FormatReport(const CheckReport& report, const Surface& surface);

// phos-fn check's exit code: 0 for kRuns, 1 otherwise.
int ExitCode(Verdict verdict);

}  // namespace phos::surface
