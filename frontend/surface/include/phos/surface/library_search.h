// Where the dynamic loader (glibc's ld.so, ld.so(8)) looks for a library a file needs, so that
// phos-fn check reads the libraries a program will really load:
//
//   1. a name with a slash is a path;
//   2. the needing file's DT_RPATH, then that of the file that loaded it and so on up to the
//      executable -- only when the needing file has no DT_RUNPATH;
//   3. LD_LIBRARY_PATH;
//   4. the needing file's own DT_RUNPATH;
//   5. the ld.so cache (`ldconfig -p`);
//   6. the default directories.
//
// $ORIGIN and ${ORIGIN} in a path stand for the directory of the file that names it; a path
// holding another dynamic string token ($LIB, $PLATFORM) is skipped. The caller tries the
// candidates in order and takes the first ELF shared object of the program's class and machine,
// as the loader does.
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
  // Searched last. Default: glibc's trusted directories.
  std::vector<std::string> default_dirs = {"/lib", "/usr/lib", "/lib64", "/usr/lib64"};

  // This process's LD_LIBRARY_PATH and LD_BIND_NOW, and the cache as `ldconfig -p` prints it.
  static Result<LoaderEnvironment> FromProcess();
};

// The cache from `ldconfig -p`'s output ("\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1").
std::multimap<std::string, std::string, std::less<>> ParseLdconfigCache(std::string_view output);

// A file on the loader's way to a library: where it lies and the search paths it names.
struct SearchScope {
  std::string origin;  // its directory, for $ORIGIN
  std::vector<std::string> rpath;
  std::vector<std::string> runpath;
};

// The paths the loader tries for `needed`, in order. `chain`: the needing file first, then the
// file that loaded it, ..., the executable last.
std::vector<std::string> CandidatePaths(std::string_view needed, const std::vector<SearchScope>& chain,
                                        const LoaderEnvironment& env);

}  // namespace phos::surface
