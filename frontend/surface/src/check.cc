#include "phos/surface/check.h"

#include <elf.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include "phos/surface/elf_file.h"

namespace phos::surface {
namespace {

constexpr size_t kCudart = 0;  // Libraries()[0]

struct Loaded {
  std::string path;
  ElfFile elf;
  std::optional<size_t> parent;  // the file whose DT_NEEDED loaded it
  // The surface library it is loaded as (phos's, or NVIDIA's where phos has none): it provides
  // the program's CUDA functions, and what it imports itself is not the program's.
  std::optional<size_t> surface_library;
};

std::string Origin(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return (ec ? std::filesystem::path(path) : absolute).parent_path().string();
}

// A library name (DT_NEEDED, or the library a symbol version names) as one of the surface's.
struct SurfaceName {
  enum Kind {
    kSoname,        // libcudart.so.13, the soname phos's library carries too
    kOtherVersion,  // libcudart.so.12, libcudart.so.13.0.48
    kUnversioned,   // libcudart.so, the toolkit's link name
  };
  size_t library;
  Kind kind;
};

// Matches `name`'s file name (a DT_NEEDED entry may be a path) against the surface's sonames.
std::optional<SurfaceName> MatchSurface(std::string_view name) {
  name = name.substr(name.rfind('/') + 1);
  for (size_t i = 0; i < kLibraryCount; ++i) {
    const std::string_view soname = Libraries()[i].soname;
    const std::string_view stem = soname.substr(0, soname.find(".so.") + 3);  // "libcudart.so"
    if (name == soname) return SurfaceName{i, SurfaceName::kSoname};
    if (name == stem) return SurfaceName{i, SurfaceName::kUnversioned};
    if (name.starts_with(stem) && name[stem.size()] == '.') return SurfaceName{i, SurfaceName::kOtherVersion};
  }
  return std::nullopt;
}

// What the loader does for one DT_NEEDED name.
struct Search {
  std::optional<Loaded> library;  // the file it takes; nullopt: none (see failure)
  Candidate where;                // where it found the file it stopped at
  std::string failure;            // why that file cannot be loaded; empty when it can, or none was found
};

Search FindLibrary(const std::string& needed, size_t requester, const std::vector<Loaded>& objects,
                   const LoaderEnvironment& env, const ElfReadOptions& read) {
  std::vector<SearchScope> chain;
  for (std::optional<size_t> i = requester; i; i = objects[*i].parent) {
    const ElfFile& elf = objects[*i].elf;
    // The executable's $ORIGIN is where it really lies (the loader reads /proc/self/exe).
    std::error_code ec;
    std::string path = *i == 0 ? std::filesystem::canonical(objects[0].path, ec).string() : objects[*i].path;
    if (ec) path = objects[*i].path;
    chain.push_back({objects[*i].path, Origin(path), elf.rpath, elf.runpath});
  }
  const ElfFile& program = objects[0].elf;
  for (Candidate& candidate : CandidatePaths(needed, chain, env)) {
    // A file the loader cannot open (absent, or not ours to read) is passed over.
    if (access(candidate.path.c_str(), R_OK) != 0) continue;
    Result<ElfFile> elf = ReadElfFile(candidate.path, read);
    // So is an ELF file of another class or machine (a host may run 32- and 64-bit programs). Any
    // other file stops the loader: it loads it, or fails ("invalid ELF header", "only ET_DYN and
    // ET_EXEC can be loaded", "cannot dynamically load executable").
    if (elf.ok() && (elf->elf_class != program.elf_class || elf->machine != program.machine)) continue;
    Search found;
    if (!elf.ok()) {
      found.failure = elf.status().message();
    } else if (elf->type != ET_DYN || elf->pie) {
      found.failure = candidate.path + ": an executable, not a shared library";
    } else {
      found.library = Loaded{candidate.path, std::move(elf).value(), requester, std::nullopt};
    }
    found.where = std::move(candidate);
    return found;
  }
  return {};
}

bool IsPhos(const std::string& path, const PhosLibrary& phos) {
  std::error_code ec;
  return std::filesystem::canonical(path, ec).string() == phos.path;
}

// Why `requester`, needing `name` (a library phos stands in for, with `phos`), keeps its calls from
// phos's library; empty when the loader takes phos's.
std::string NotRedirected(const std::string& requester, const std::string& name, const SurfaceName& match,
                          const Search& found, const PhosLibrary& phos) {
  const Library& l = Libraries()[match.library];
  if (match.kind == SurfaceName::kOtherVersion) {
    return fmt::format(
        "{} needs {}, another version of the {} than the {} phos stands in for: rebuild it "
        "against the CUDA toolkit phos serves",
        requester, name, l.title, l.soname);
  }
  if (match.kind == SurfaceName::kUnversioned) {
    return fmt::format(
        "{} needs {}, the {}'s unversioned link name, where phos stands in for its soname {} "
        "only: relink it against a library whose soname is {}",
        requester, name, l.title, l.soname, l.soname);
  }
  if (!found.library || IsPhos(found.library->path, phos)) return "";
  switch (found.where.source) {
    case CandidateSource::kPath:
      return fmt::format(
          "{} needs {} by its path, so the loader takes that file, not phos's {}: relink it "
          "against the library by its soname",
          requester, name, phos.file());
    case CandidateSource::kRpath:
      return fmt::format(
          "{} loads {} for {}: {} is searched before LD_LIBRARY_PATH, where phos-fn run puts "
          "phos's {}; relink it with a DT_RUNPATH (-Wl,--enable-new-dtags) or without that "
          "run path",
          requester, found.library->path, name, DescribeSource(found.where), phos.file());
    default:
      return fmt::format("{} loads {} for {} (from {}), not phos's {}", requester, found.library->path, name,
                         DescribeSource(found.where), phos.file());
  }
}

// Loads the libraries of objects[0] (the program) breadth first, as the loader does, into
// `objects`; what stops that goes into `report`. `nvidia`: NVIDIA's library the loader takes for
// each surface library phos has none of.
void LoadLibraries(const Surface& surface, const LoaderEnvironment& env, const ElfReadOptions& read,
                   std::vector<Loaded>* objects, std::array<std::string, kLibraryCount>* nvidia,
                   CheckReport* report) {
  // A name is loaded once, whether a DT_NEEDED or a loaded file's soname gives it.
  std::set<std::string, std::less<>> loaded;
  if (!objects->front().elf.soname.empty()) loaded.insert(objects->front().elf.soname);
  for (size_t i = 0; i < objects->size(); ++i) {
    // Copies: objects grows below, which moves what objects[i] holds.
    const std::vector<std::string> needed = (*objects)[i].elf.needed;
    const std::string requester = (*objects)[i].path;
    for (const std::string& name : needed) {
      if (!loaded.insert(name).second) continue;
      const std::optional<SurfaceName> match = MatchSurface(name);
      // A surface library holds no CUDA runtime of its own to look for.
      Search found = FindLibrary(name, i, *objects, env, match ? ElfReadOptions{} : read);
      if (!found.failure.empty()) {
        report->load_failures.push_back(
            fmt::format("{} (needed by {}) cannot be loaded: {}", name, requester, found.failure));
        continue;
      }
      if (match) {
        const Library& l = Libraries()[match->library];
        if (const std::optional<PhosLibrary>& phos = surface.Phos(match->library)) {
          if (std::string why = NotRedirected(requester, name, *match, found, *phos); !why.empty()) {
            report->not_redirected.push_back(std::move(why));
          }
        } else if (found.library) {
          (*nvidia)[match->library] = found.library->path;
        } else {
          report->load_failures.push_back(fmt::format(
              "missing {} (needed by {}; phos has no {} library yet, and the loader finds no other)", name,
              requester, l.title));
          continue;
        }
        if (found.library) found.library->surface_library = match->library;
      }
      if (!found.library) {
        report->load_failures.push_back(fmt::format("missing {} (needed by {})", name, requester));
        continue;
      }
      if (!found.library->elf.soname.empty()) loaded.insert(found.library->elf.soname);
      objects->push_back(std::move(*found.library));
    }
  }
}

// Without a dynamic loader (PT_INTERP) an executable loads no library at all.
bool StaticallyLinked(const ElfFile& elf) {
  return elf.interpreter.empty() && (elf.type == ET_EXEC || elf.pie || !elf.dynamic);
}

// Why `object` holds the CUDA runtime itself (linked statically); empty when it does not.
std::string StaticRuntimeEvidence(const Loaded& object, const Surface& surface) {
  const std::vector<std::string>& cudart = surface.NvidiaFunctions(kCudart);
  std::vector<std::string> defined = object.elf.static_functions;  // already among cudart's
  std::set_intersection(object.elf.exports.begin(), object.elf.exports.end(), cudart.begin(), cudart.end(),
                        std::back_inserter(defined));
  if (!defined.empty()) {
    std::sort(defined.begin(), defined.end());
    defined.erase(std::unique(defined.begin(), defined.end()), defined.end());
    const bool malloc = std::binary_search(defined.begin(), defined.end(), "cudaMalloc");
    return fmt::format("{} defines {} of the CUDA runtime's functions itself ({})", object.path,
                       defined.size(), malloc ? "cudaMalloc among them" : defined.front());
  }
  // Stripped: kernels (.nv_fatbin) registered with no imported __cudaRegisterFatBinary.
  const auto& imports = object.elf.imports;
  const bool registers = std::any_of(imports.begin(), imports.end(),
                                     [](const ElfImport& i) { return i.name == "__cudaRegisterFatBinary"; });
  if (object.elf.cuda_kernels && !registers) {
    return fmt::format("{} holds CUDA kernels (.nv_fatbin) but imports no __cudaRegisterFatBinary",
                       object.path);
  }
  return "";
}

// The surface library `import` is taken from; nullopt when it is none of the surface's.
std::optional<size_t> LibraryOfImport(const ElfImport& import, const std::vector<Loaded>& objects,
                                      const Surface& surface) {
  // A symbol version names the library exactly (cudaMalloc@libcudart.so.13).
  if (!import.version_library.empty()) {
    std::optional<SurfaceName> match = MatchSurface(import.version_library);
    if (!match) return std::nullopt;
    return match->library;
  }
  // Unversioned, it binds to the first definition in load order: a library of the program's own
  // that exports cuda_init takes it.
  for (const Loaded& object : objects) {
    const std::vector<std::string>& exports = object.elf.exports;
    if (std::binary_search(exports.begin(), exports.end(), import.name)) return object.surface_library;
  }
  return surface.LibraryOf(import.name);  // defined nowhere: NVIDIA's lists and prefixes say
}

// What `import` of `object`, a function of `library`, does on phos's libraries. `nvidia`: NVIDIA's
// library answering for it where phos has none.
CheckedImport Assess(const ElfImport& import, size_t library, const std::string& object,
                     const Surface& surface, bool bind_now, const std::string& nvidia) {
  CheckedImport c{import.name, object, surface.Lookup(import.name, library), Effect::kServed, "", ""};
  const FunctionState& s = c.state;
  if (s.state == State::kServed) {
    if (!s.error.empty()) c.why = fmt::format("{} for {}", s.error, s.note);
    return c;
  }
  c.effect = Effect::kFailsAtCall;
  if (s.state == State::kRefused) {
    c.why = fmt::format("returns {}: {}", s.error, s.note);
    c.failure = fmt::format("{} (returns {})", c.function, s.error);
    return c;
  }
  const std::optional<PhosLibrary>& phos = surface.Phos(library);
  c.why = phos ? fmt::format("not exported by {}", phos->file())
               : fmt::format("phos has no {} yet", Libraries()[library].soname);
  const Binding binding = bind_now ? Binding::kAtLoad : import.binding;
  if (!nvidia.empty()) {
    c.why += fmt::format("; NVIDIA's {} answers it, outside phosd", nvidia);
    c.failure = fmt::format("{} (NVIDIA's, outside phosd)", c.function);
  } else if (import.weak) {
    c.why += "; a weak import: its address is null";
    c.failure = fmt::format("{} (missing, null)", c.function);
  } else if (binding == Binding::kLazy) {
    c.why += "; bound lazily: its first call ends the process (\"symbol lookup error\")";
    c.failure = fmt::format("{} (missing)", c.function);
  } else {
    c.effect = Effect::kStopsLoad;
    c.why += binding == Binding::kAtLoad
                 ? "; bound when the program loads"
                 : "; bound lazily or when the program loads (phos does not know this "
                   "machine's PLT relocations): taken as when it loads";
    c.failure = "missing " + c.function;
  }
  return c;
}

}  // namespace

Verdict CheckReport::verdict() const {
  if (!not_redirected.empty()) return Verdict::kNotRedirected;
  auto any = [this](Effect effect) {
    return std::any_of(imports.begin(), imports.end(),
                       [&](const CheckedImport& i) { return i.effect == effect; });
  };
  if (!load_failures.empty() || any(Effect::kStopsLoad)) return Verdict::kWillNotLoad;
  if (any(Effect::kFailsAtCall)) return Verdict::kCallsFail;
  return imports.empty() ? Verdict::kNoCudaImports : Verdict::kRuns;
}

int ExitCode(Verdict verdict) {
  return verdict == Verdict::kRuns ? 0 : 1;
}

Result<CheckReport> CheckProgram(const std::string& program, const Surface& surface,
                                 const LoaderEnvironment& env) {
  // Only a file that is none of the surface's libraries may hold the CUDA runtime itself.
  const ElfReadOptions read{.static_functions_among = &surface.NvidiaFunctions(kCudart)};
  PHOS_ASSIGN_OR_RETURN(ElfFile elf, ReadElfFile(program, read));
  if (elf.type != ET_EXEC && elf.type != ET_DYN) {
    return Status::InvalidArgument(program + ": not an executable or shared library (ELF type " +
                                   std::to_string(elf.type) + ")");
  }
  CheckReport report;
  report.program = program;
  if (StaticallyLinked(elf)) {
    report.objects.push_back(program);
    report.not_redirected.push_back(
        program +
        " is statically linked: no dynamic loader runs for it, so phos's libraries cannot be loaded "
        "into it");
    return report;
  }
  std::vector<Loaded> objects;
  objects.push_back({program, std::move(elf), std::nullopt, std::nullopt});
  std::array<std::string, kLibraryCount> nvidia;
  LoadLibraries(surface, env, read, &objects, &nvidia, &report);

  for (const Loaded& object : objects) {
    report.objects.push_back(object.path);
    if (object.surface_library) continue;
    if (std::string evidence = StaticRuntimeEvidence(object, surface); !evidence.empty()) {
      report.not_redirected.push_back(evidence +
                                      ": it links the CUDA runtime statically, so its CUDA calls cannot "
                                      "be redirected to phosd; rebuild it with `nvcc -cudart shared` "
                                      "(or link libcudart.so)");
    }
    for (const ElfImport& import : object.elf.imports) {
      if (std::optional<size_t> library = LibraryOfImport(import, objects, surface)) {
        report.imports.push_back(
            Assess(import, *library, object.path, surface, env.bind_now, nvidia[*library]));
      }
    }
  }
  std::sort(report.imports.begin(), report.imports.end(), [](const CheckedImport& a, const CheckedImport& b) {
    return std::tie(a.state.library, a.function, a.object) < std::tie(b.state.library, b.function, b.object);
  });
  return report;
}

std::string FormatReport(const CheckReport& report) {
  std::string out;
  std::set<std::string> importers;
  for (const CheckedImport& i : report.imports) importers.insert(i.object);
  out += fmt::format(
      "{}: {} CUDA function import{} in {} of {} file{} (the program and the libraries it loads)\n",
      report.program, report.imports.size(), report.imports.size() == 1 ? "" : "s", importers.size(),
      report.objects.size(), report.objects.size() == 1 ? "" : "s");
  std::vector<std::string> stops = report.load_failures;
  std::vector<std::string> fails;
  for (const CheckedImport& i : report.imports) {
    out += fmt::format("  {:<8} {:<40} {:<13} {}{}\n", StateName(i.state.state), i.function,
                       Libraries()[i.state.library].title, i.object, i.why.empty() ? "" : "  " + i.why);
    if (i.effect == Effect::kStopsLoad) stops.push_back(i.failure);
    if (i.effect == Effect::kFailsAtCall) fails.push_back(i.failure);
  }

  // A program whose CUDA calls do not reach phos's libraries at all has that to fix first: what
  // its imports would do on them is moot until then.
  if (!report.not_redirected.empty()) {
    for (const std::string& why : report.not_redirected) out += "cannot be redirected: " + why + "\n";
    return out;
  }
  if (!stops.empty()) out += fmt::format("will not load: {}\n", fmt::join(stops, ", "));
  if (!fails.empty()) {
    out += fmt::format("{}{}\n", stops.empty() ? "loads; these calls fail: " : "these calls fail too: ",
                       fmt::join(fails, ", "));
  }
  const Verdict verdict = report.verdict();
  if (verdict == Verdict::kNoCudaImports) out += "no CUDA imports found; libraries it dlopens are not seen\n";
  if (verdict == Verdict::kRuns) out += "runs\n";
  return out;
}

}  // namespace phos::surface
