// Where the dynamic loader (glibc's ld.so, ld.so(8)) looks for a library a file needs, so that
// phos-fn check reads the libraries a program will really load under phos-fn run:
//
//   1. a name with a slash is a path;
//   2. the needing file's DT_RPATH, then that of the file that loaded it and so on up to the
//      executable -- only when the needing file has no DT_RUNPATH, and skipping each file that
//      has one (glibc ignores the DT_RPATH of a file with a DT_RUNPATH);
//   3. LD_LIBRARY_PATH;
//   4. the needing file's own DT_RUNPATH;
//   5. the ld.so cache (`ldconfig -p`);
//   6. the system search path (`ld.so --help`: /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu,
//      /lib, /usr/lib on Debian's x86-64).
//
// $ORIGIN and ${ORIGIN} in a path stand for the directory of the file that names it (of the
// executable, in LD_LIBRARY_PATH); a path holding another dynamic string token ($LIB, $PLATFORM)
// is skipped; an empty entry is the current directory. Not modelled: the glibc-hwcaps and legacy
// hardware-capability subdirectories the loader tries under each directory before it, and
// DF_1_NODEFLIB. The caller tries the candidates in order: a file that does not exist, or is an
// ELF file of another class or machine, is passed over; any other file stops the search, loaded
// or failing to load as it is.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"

namespace phos::surface {

struct LoaderEnvironment {
  // LD_LIBRARY_PATH's entries; an empty entry is the current directory. Default: none.
  std::vector<std::string> ld_library_path;
  // LD_BIND_NOW is set: every import is bound when its file loads. Default: false.
  bool bind_now = false;
  // The ld.so cache: library name -> paths, in the cache's order. Default: empty.
  std::multimap<std::string, std::string, std::less<>> cache;
  // Searched last, in order. Default: none.
  std::vector<std::string> system_dirs;

  // What the loader sees when this process starts a program with phos-fn run: the
  // LD_LIBRARY_PATH of RunLibraryPath(frontend_lib_dir), this process's LD_BIND_NOW, the cache
  // as `ldconfig -p` prints it and the system search path as this machine's ld.so prints it.
  static Result<LoaderEnvironment> ForPhosRun(const std::string& frontend_lib_dir);
};

// The LD_LIBRARY_PATH phos-fn run gives a program: `frontend_lib_dir` (phos's libraries under
// NVIDIA's sonames) first, then this process's LD_LIBRARY_PATH, if any.
std::string RunLibraryPath(const std::string& frontend_lib_dir);

// The cache from `ldconfig -p`'s output ("\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1").
std::multimap<std::string, std::string, std::less<>> ParseLdconfigCache(std::string_view output);

// The system search path from `ld.so --help`'s output: its "  /dir (system search path)" lines,
// in order.
std::vector<std::string> ParseSystemSearchPath(std::string_view help);

// A file on the loader's way to a library: where it lies and the search paths it names.
struct SearchScope {
  std::string file;    // its path, to name it
  std::string origin;  // its directory, for $ORIGIN
  std::vector<std::string> rpath;
  std::vector<std::string> runpath;
};

// Where the loader takes a candidate from.
enum class CandidateSource { kPath, kRpath, kLdLibraryPath, kRunpath, kCache, kSystem };

struct Candidate {
  std::string path;
  CandidateSource source = CandidateSource::kPath;
  std::string named_by;  // kRpath, kRunpath: the file whose DT_RPATH or DT_RUNPATH it is
};

// "the DT_RPATH of /opt/app/bin/app", "LD_LIBRARY_PATH", ...
std::string DescribeSource(const Candidate& candidate);

// The paths the loader tries for `needed`, in order. `chain`: the needing file first, then the
// file that loaded it, ..., the executable last.
std::vector<Candidate> CandidatePaths(std::string_view needed, const std::vector<SearchScope>& chain,
                                      const LoaderEnvironment& env);

// The file execvp(3) runs for `name`, as phos-fn run starts a program: `name` itself when it
// holds a slash, else the first regular file of that name in `path_variable` (PATH's value; an
// empty entry is the current directory; null: PATH is unset, and the system's default path is
// searched) that this process may execute. NotFound when there is none.
Result<std::string> FindProgram(const std::string& name, const char* path_variable);

}  // namespace phos::surface
