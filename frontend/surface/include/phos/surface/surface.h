// The CUDA surface phos serves: for each NVIDIA library phos stands in for (or will), every
// function NVIDIA's library exports and what phos does with it.
//
//   served   phos's library exports it and it works (some argument values may be refused: a note
//            says which)
//   refused  phos's library exports it, and it always returns an error
//   lacks    phos's library does not export it (or there is no phos library for it yet)
//
// Three sources, nothing listed twice: NVIDIA's export lists (frontend/surface/nvidia/*.txt,
// written by scripts/surface.sh from the toolkit, compiled in), the functions phos's libraries
// export (read from the built libraries' dynamic symbol tables), and the refusals
// (frontend/surface/refused.tsv, kept by hand, compiled in). `phos-fn check` and
// docs/compatibility.md both read a Surface.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"

namespace phos::surface {

// One NVIDIA library phos stands in for, or will.
struct Library {
  std::string_view name;    // the data file's stem: "cudart"
  std::string_view title;   // "CUDA runtime"
  std::string_view soname;  // NVIDIA's soname, which phos's library takes too: "libcudart.so.13"
  // Name prefixes that mark a function as this library's even when NVIDIA's list lacks it (a
  // function of a newer toolkit); empty: only the list's names (the driver's "cu" would take
  // libcurl's "curl_*" too).
  std::vector<std::string_view> prefixes;
};

inline constexpr size_t kLibraryCount = 5;
// cudart, cublas, cublasLt, nccl, driver: the order of the compatibility table.
const std::array<Library, kLibraryCount>& Libraries();

enum class State { kServed, kRefused, kLacks };
std::string_view StateName(State state);  // "served", "refused", "lacks"

// What phos does with one function of a library.
struct FunctionState {
  State state = State::kLacks;
  size_t library = 0;  // index into Libraries()
  // refused: the error it returns ("cudaErrorNotSupported"); served with a note: the error
  // returned for the argument values it refuses. Otherwise empty.
  std::string error;
  // refused: why; served: which argument values are refused, and why. Otherwise empty.
  std::string note;
};

// phos's library standing in for one of NVIDIA's.
struct PhosLibrary {
  // The file, symbolic links resolved: <build>/lib/phos/frontend/libphos-cudart.so.
  std::string path;
  // The functions it exports.
  std::vector<std::string> exports;

  std::string file() const;  // the file's name: "libphos-cudart.so"
};

// What Surface::Build reads.
struct SurfaceSources {
  // nvidia/<name>.txt of each library: a first line "# <toolkit>: ..." saying where the list came
  // from, then one function per line, sorted.
  std::array<std::string_view, kLibraryCount> nvidia;
  // refused.tsv: "symbol<TAB>refused|partial<TAB>error<TAB>why" lines; '#' starts a comment.
  std::string_view refusals;
  // phos's library for each; nullopt: phos has none with that soname.
  std::array<std::optional<PhosLibrary>, kLibraryCount> phos;

  // NVIDIA's lists and the refusals compiled into phos, with the libraries that
  // `frontend_lib_dir` (<build>/lib/phos/frontend, where `phos-fn run` points the loader) holds under
  // NVIDIA's sonames. The directory must exist.
  static Result<SurfaceSources> WithLibrariesIn(const std::string& frontend_lib_dir);
};

class Surface {
 public:
  // Checks the sources against each other: a refusal of a function phos does not export (or
  // that is no function of NVIDIA's libraries) is an error naming it, as is a malformed line.
  static Result<Surface> Build(const SurfaceSources& sources);
  // Build(SurfaceSources::WithLibrariesIn(frontend_lib_dir)).
  static Result<Surface> Load(const std::string& frontend_lib_dir);

  // The library a function belongs to by its name (NVIDIA's lists, then the prefixes); nullopt:
  // it is none of the surface's. (phos-fn check asks this only of an import that no symbol
  // version and no loaded file's definition attributes.)
  std::optional<size_t> LibraryOf(std::string_view function) const;
  // What phos does with `function`, a function of library `library`.
  FunctionState Lookup(std::string_view function, size_t library) const;

  // NVIDIA's functions of a library, sorted.
  const std::vector<std::string>& NvidiaFunctions(size_t library) const { return nvidia_[library]; }
  // Where NVIDIA's list came from (its first line, without "# ").
  const std::string& NvidiaOrigin(size_t library) const { return origins_[library]; }
  // phos's library standing in for it; nullopt when phos has none yet.
  const std::optional<PhosLibrary>& Phos(size_t library) const { return phos_[library]; }

 private:
  struct Refusal {
    bool partial = false;  // served for other argument values
    std::string error;
    std::string why;
  };

  std::array<std::vector<std::string>, kLibraryCount> nvidia_;
  std::array<std::string, kLibraryCount> origins_;
  std::array<std::optional<PhosLibrary>, kLibraryCount> phos_;  // exports sorted
  std::map<std::string, Refusal, std::less<>> refusals_;
};

}  // namespace phos::surface
