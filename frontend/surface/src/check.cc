#include "phos/surface/check.h"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
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
};

std::string Origin(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return (ec ? std::filesystem::path(path) : absolute).parent_path().string();
}

// The file the loader takes for `needed` from `objects[requester]`; nullopt when none fits.
std::optional<Loaded> FindLibrary(const std::string& needed, size_t requester,
                                  const std::vector<Loaded>& objects, const LoaderEnvironment& env) {
  std::vector<SearchScope> chain;
  for (std::optional<size_t> i = requester; i; i = objects[*i].parent) {
    const ElfFile& elf = objects[*i].elf;
    // The executable's $ORIGIN is where it really lies (the loader reads /proc/self/exe).
    std::error_code ec;
    std::string path = *i == 0 ? std::filesystem::canonical(objects[0].path, ec).string() : objects[*i].path;
    if (ec) path = objects[*i].path;
    chain.push_back({Origin(path), elf.rpath, elf.runpath});
  }
  const ElfFile& program = objects[0].elf;
  for (const std::string& candidate : CandidatePaths(needed, chain, env)) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(candidate, ec)) continue;
    // A file of another class or machine, or no ELF at all, is passed over as the loader does.
    Result<ElfFile> elf = ReadElfFile(candidate);
    if (!elf.ok() || elf->elf_class != program.elf_class || elf->machine != program.machine) continue;
    return Loaded{candidate, std::move(elf).value(), requester};
  }
  return std::nullopt;
}

// The soname of a surface library with another version ("libcudart.so.12" beside
// "libcudart.so.13"); nullopt when `needed` is none.
std::optional<size_t> OtherVersionOf(const std::string& needed) {
  for (size_t i = 0; i < kLibraryCount; ++i) {
    std::string_view soname = Libraries()[i].soname;
    std::string_view stem = soname.substr(0, soname.find(".so.") + 4);
    if (needed != soname && needed.starts_with(stem)) return i;
  }
  return std::nullopt;
}

// Why `object` holds the CUDA runtime itself (linked statically); empty when it does not.
std::string StaticRuntimeEvidence(const Loaded& object, const Surface& surface) {
  const std::vector<std::string>& cudart = surface.NvidiaFunctions(kCudart);
  std::vector<std::string> defined;
  for (const std::vector<std::string>* list : {&object.elf.exports, &object.elf.static_functions}) {
    std::set_intersection(list->begin(), list->end(), cudart.begin(), cudart.end(),
                          std::back_inserter(defined));
  }
  if (!defined.empty()) {
    std::sort(defined.begin(), defined.end());
    defined.erase(std::unique(defined.begin(), defined.end()), defined.end());
    const bool malloc = std::binary_search(defined.begin(), defined.end(), "cudaMalloc");
    return fmt::format("{} defines {} of the CUDA runtime's functions itself ({})", object.path,
                       defined.size(), malloc ? "cudaMalloc among them" : defined.front());
  }
  // Stripped: kernels (.nv_fatbin) registered with no imported __cudaRegisterFatBinary.
  const auto& sections = object.elf.sections;
  const auto& imports = object.elf.imports;
  const bool kernels = std::find(sections.begin(), sections.end(), ".nv_fatbin") != sections.end();
  const bool registers = std::any_of(imports.begin(), imports.end(),
                                     [](const ElfImport& i) { return i.name == "__cudaRegisterFatBinary"; });
  if (kernels && !registers) {
    return fmt::format("{} holds CUDA kernels (.nv_fatbin) but imports no __cudaRegisterFatBinary",
                       object.path);
  }
  return "";
}

}  // namespace

Verdict CheckReport::verdict() const {
  if (!not_redirected.empty()) return Verdict::kNotRedirected;
  if (!missing_libraries.empty()) return Verdict::kWillNotLoad;
  bool calls_fail = false;
  for (const CheckedImport& i : imports) {
    if (i.state.state == State::kServed) continue;
    if (i.state.state == State::kLacks && i.answered_by.empty() && i.bound_at_load && !i.weak) {
      return Verdict::kWillNotLoad;
    }
    calls_fail = true;
  }
  return calls_fail ? Verdict::kCallsFail : Verdict::kRuns;
}

int ExitCode(Verdict verdict) {
  return verdict == Verdict::kRuns ? 0 : 1;
}

Result<CheckReport> CheckProgram(const std::string& program, const Surface& surface,
                                 const LoaderEnvironment& env) {
  PHOS_ASSIGN_OR_RETURN(ElfFile elf, ReadElfFile(program));
  if (elf.type != ET_EXEC && elf.type != ET_DYN) {
    return Status::InvalidArgument(program + ": not an executable or shared library (ELF type " +
                                   std::to_string(elf.type) + ")");
  }
  std::vector<Loaded> objects;
  objects.push_back({program, std::move(elf), std::nullopt});
  CheckReport report;
  report.program = program;

  // Breadth first, as the loader loads; a name is loaded once, by DT_NEEDED or by soname.
  std::set<std::string, std::less<>> loaded;
  std::array<std::string, kLibraryCount> answered_by;  // NVIDIA's library found where phos has none
  for (size_t i = 0; i < objects.size(); ++i) {
    if (i == 0 && !objects[0].elf.soname.empty()) loaded.insert(objects[0].elf.soname);
    const std::vector<std::string> needed = objects[i].elf.needed;
    for (const std::string& name : needed) {
      if (!loaded.insert(name).second) continue;
      auto surface_library = std::find_if(Libraries().begin(), Libraries().end(),
                                          [&](const Library& l) { return l.soname == name; });
      if (surface_library != Libraries().end()) {
        const size_t index = static_cast<size_t>(surface_library - Libraries().begin());
        if (!surface.PhosFile(index).empty()) continue;  // phos's stands in for it
        // phos has none yet: the loader looks further, and NVIDIA's answers if it is there.
        if (std::optional<Loaded> nvidia = FindLibrary(name, i, objects, env)) {
          answered_by[index] = nvidia->path;
        } else {
          report.missing_libraries.push_back(fmt::format(
              "{} (needed by {}; phos has none yet, and the loader finds no other)", name, objects[i].path));
        }
        continue;
      }
      if (std::optional<size_t> other = OtherVersionOf(name)) {
        report.not_redirected.push_back(
            fmt::format("{} needs {}, and phos stands in for {} only: rebuild it against "
                        "the CUDA toolkit phos serves",
                        objects[i].path, name, Libraries()[*other].soname));
        continue;
      }
      std::optional<Loaded> library = FindLibrary(name, i, objects, env);
      if (!library) {
        report.missing_libraries.push_back(fmt::format("{} (needed by {})", name, objects[i].path));
        continue;
      }
      if (!library->elf.soname.empty()) loaded.insert(library->elf.soname);
      objects.push_back(std::move(*library));
    }
  }

  for (const Loaded& object : objects) {
    report.objects.push_back(object.path);
    if (std::string evidence = StaticRuntimeEvidence(object, surface); !evidence.empty()) {
      report.not_redirected.push_back(evidence +
                                      ": it links the CUDA runtime statically, so its CUDA calls cannot "
                                      "be redirected to phosd; rebuild it with `nvcc -cudart shared` "
                                      "(or link libcudart.so)");
    }
    for (const ElfImport& import : object.elf.imports) {
      std::optional<size_t> library = surface.LibraryOf(import.name);
      if (!library) continue;
      report.imports.push_back({import.name, object.path, import.weak, import.bound_at_load || env.bind_now,
                                surface.Lookup(import.name, *library), answered_by[*library]});
    }
  }
  std::sort(report.imports.begin(), report.imports.end(), [](const CheckedImport& a, const CheckedImport& b) {
    return std::tie(a.state.library, a.function, a.object) < std::tie(b.state.library, b.function, b.object);
  });
  return report;
}

std::string FormatReport(const CheckReport& report, const Surface& surface) {
  std::string out;
  std::set<std::string> importers;
  for (const CheckedImport& i : report.imports) importers.insert(i.object);
  out += fmt::format(
      "{}: {} CUDA function import{} in {} of {} file{} (the program and the libraries it loads)\n",
      report.program, report.imports.size(), report.imports.size() == 1 ? "" : "s", importers.size(),
      report.objects.size(), report.objects.size() == 1 ? "" : "s");

  std::vector<std::string> missing = report.missing_libraries;
  std::vector<std::string> failing;
  for (const CheckedImport& i : report.imports) {
    const FunctionState& s = i.state;
    std::string detail;
    if (s.state == State::kRefused) {
      detail = fmt::format("returns {}: {}", s.error, s.note);
      failing.push_back(fmt::format("{} (returns {})", i.function, s.error));
    } else if (s.state == State::kServed && !s.error.empty()) {
      detail = fmt::format("{} for {}", s.error, s.note);
    } else if (s.state == State::kLacks) {
      const std::string& file = surface.PhosFile(s.library);
      detail = file.empty() ? fmt::format("phos has no {} yet", Libraries()[s.library].soname)
                            : fmt::format("not exported by {}", file);
      if (!i.answered_by.empty()) {
        detail += fmt::format("; NVIDIA's {} answers it, outside phosd", i.answered_by);
        failing.push_back(fmt::format("{} (NVIDIA's, outside phosd)", i.function));
      } else if (i.weak) {
        detail += "; a weak import: its address is null";
        failing.push_back(fmt::format("{} (missing, null)", i.function));
      } else if (i.bound_at_load) {
        detail += "; bound when the program loads";
        missing.push_back(i.function);
      } else {
        detail += "; bound lazily: its first call ends the process (\"symbol lookup error\")";
        failing.push_back(fmt::format("{} (missing)", i.function));
      }
    }
    out += fmt::format("  {:<8} {:<40} {:<13} {}{}\n", StateName(s.state), i.function,
                       Libraries()[s.library].title, i.object, detail.empty() ? "" : "  " + detail);
  }

  auto join = [](const std::vector<std::string>& items) {
    std::string s;
    for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
    return s;
  };
  // A program whose CUDA calls do not reach phos's libraries at all has that to fix first: what
  // its imports would do on them is moot until then.
  if (!report.not_redirected.empty()) {
    for (const std::string& why : report.not_redirected) out += "cannot be redirected: " + why + "\n";
    return out;
  }
  if (!missing.empty()) out += "will not load: missing " + join(missing) + "\n";
  if (!failing.empty()) {
    out += (missing.empty() ? "loads; these calls fail: " : "these calls fail too: ") + join(failing) + "\n";
  }
  if (report.verdict() == Verdict::kRuns) out += "runs\n";
  return out;
}

}  // namespace phos::surface
