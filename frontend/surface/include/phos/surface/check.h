// "Will my program run?": the CUDA functions a program and the libraries it loads import, each
// with what phos does with it (phos-fn check). The program's libraries are found as the loader
// finds them under phos-fn run (LoaderEnvironment::ForPhosRun); NVIDIA's sonames are no
// exception: where the first file the loader takes for one is phos's library, phos serves its
// functions; where it is another (a DT_RPATH searched before LD_LIBRARY_PATH, a path in
// DT_NEEDED), the program's calls cannot be redirected. Where phos has no library for a soname
// yet, NVIDIA's library the loader finds instead answers the calls outside phosd.
//
// Each import is attributed by its symbol version (cudaMalloc@libcudart.so.13 is libcudart's),
// else by the first loaded file that defines it (a program's own library exporting cuda_init is
// no CUDA library), else by its name (NVIDIA's lists, then the prefixes).
//
//   PHOS_ASSIGN_OR_RETURN(Surface surface, Surface::Load(frontend_lib_dir));
//   PHOS_ASSIGN_OR_RETURN(LoaderEnvironment env, LoaderEnvironment::ForPhosRun(frontend_lib_dir));
//   PHOS_ASSIGN_OR_RETURN(CheckReport report, CheckProgram("./my_program", surface, env));
//   std::cout << FormatReport(report);
#pragma once

#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/surface/library_search.h"
#include "phos/surface/surface.h"

namespace phos::surface {

// What an import does to the program on phos's libraries.
enum class Effect {
  // phos serves it.
  kServed,
  // The program loads, and the call fails: refused, missing and bound lazily (the process ends
  // there), missing and weak (a null address), or answered by NVIDIA's library outside phosd.
  kFailsAtCall,
  // Missing and bound at load (or bound in a way phos cannot tell): the loader refuses the program.
  kStopsLoad,
};

struct CheckedImport {
  std::string function;
  std::string object;  // the file importing it: the program, or a library it loads
  FunctionState state;
  Effect effect = Effect::kServed;
  // Why, on the import's line: "bound lazily: its first call ends the process ..."; empty when
  // there is nothing to say.
  std::string why;
  // The import in the verdict line: "cudaGraphCreate (missing)", "missing cudaGraphCreate";
  // empty when served.
  std::string failure;
};

enum class Verdict {
  kRuns,           // every import is served
  kNoCudaImports,  // nothing imports a CUDA function: what the program dlopens is not seen
  kCallsFail,      // it loads, and some calls fail
  kWillNotLoad,    // an import stops the load, or a library is not found or cannot be loaded
  kNotRedirected,  // its CUDA calls do not reach phos's libraries at all
};

struct CheckReport {
  std::string program;
  // The files read: the program, then each library it loads, in the loader's order.
  std::vector<std::string> objects;
  // Sorted by library, function and importing file.
  std::vector<CheckedImport> imports;
  // Why the loader stops: "missing libfoo.so.1 (needed by /path/prog)", or a file it finds first
  // that is no loadable ELF file.
  std::vector<std::string> load_failures;
  // Why its CUDA calls cannot be redirected to phosd; empty when they can.
  std::vector<std::string> not_redirected;

  Verdict verdict() const;
};

// Reads `program` and the libraries it loads. An error when `program` itself cannot be read as
// an executable or shared library.
Result<CheckReport> CheckProgram(const std::string& program, const Surface& surface,
                                 const LoaderEnvironment& env);

// The report as phos-fn check prints it: one line per import, then the verdict ("runs",
// "will not load: missing X", "loads; these calls fail: Y", ...) as the last lines.
std::string FormatReport(const CheckReport& report);

// phos-fn check's exit code: 0 for kRuns, 1 otherwise.
int ExitCode(Verdict verdict);

}  // namespace phos::surface
