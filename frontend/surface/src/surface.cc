#include "phos/surface/surface.h"

#include <algorithm>
#include <filesystem>

#include "phos/base/strings.h"
#include "phos/surface/elf_file.h"
#include "surface_data.h"

namespace phos::surface {
namespace {

bool Contains(const std::vector<std::string>& sorted, std::string_view name) {
  return std::binary_search(sorted.begin(), sorted.end(), name, std::less<>());
}

// The lines of `text`, without their '\n' (the last line's is optional).
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines = Split(text, "\n");
  if (lines.back().empty()) lines.pop_back();
  return lines;
}

}  // namespace

const std::array<Library, kLibraryCount>& Libraries() {
  static const std::array<Library, kLibraryCount> libraries = {{
      {"cudart", "CUDA runtime", "libcudart.so.13", {"cuda", "__cuda"}},
      {"cublas", "cuBLAS", "libcublas.so.13", {"cublas"}},
      {"cublasLt", "cuBLASLt", "libcublasLt.so.13", {"cublasLt"}},
      {"nccl", "NCCL", "libnccl.so.2", {"nccl"}},
      {"driver", "CUDA driver", "libcuda.so.1", {}},
  }};
  return libraries;
}

std::string_view StateName(State state) {
  switch (state) {
    case State::kServed:
      return "served";
    case State::kRefused:
      return "refused";
    case State::kLacks:
      return "lacks";
  }
  return "?";
}

std::string PhosLibrary::file() const {
  return std::filesystem::path(path).filename().string();
}

Result<SurfaceSources> SurfaceSources::WithLibrariesIn(const std::string& frontend_lib_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(frontend_lib_dir, ec)) {
    return Status::NotFound("phos's libraries: no directory " + frontend_lib_dir);
  }
  SurfaceSources s;
  s.nvidia = data::kNvidia;
  s.refusals = data::kRefusals;
  for (size_t i = 0; i < kLibraryCount; ++i) {
    // What the loader finds there under NVIDIA's soname is what a program gets under phos-fn run.
    const std::filesystem::path path = std::filesystem::path(frontend_lib_dir) / Libraries()[i].soname;
    if (!std::filesystem::exists(path, ec)) continue;
    PHOS_ASSIGN_OR_RETURN(ElfFile elf, ReadElfFile(path.string()));
    std::filesystem::path file = std::filesystem::canonical(path, ec);
    s.phos[i] = PhosLibrary{(ec ? path : file).string(), std::move(elf.exports)};
  }
  return s;
}

Result<Surface> Surface::Build(const SurfaceSources& sources) {
  Surface s;
  for (size_t i = 0; i < kLibraryCount; ++i) {
    const std::string where = "nvidia/" + std::string(Libraries()[i].name) + ".txt";
    std::vector<std::string_view> lines = Lines(sources.nvidia[i]);
    if (lines.empty() || lines[0].substr(0, 2) != "# ") {
      return Status::Corruption(where + ": the first line must say where the list came from (\"# ...\")");
    }
    s.origins_[i] = std::string(lines[0].substr(2));
    for (size_t l = 1; l < lines.size(); ++l) {
      if (lines[l].empty() || lines[l].find_first_of(" \t#") != std::string_view::npos) {
        return Status::Corruption(where + ":" + std::to_string(l + 1) + ": not a function name");
      }
      if (!s.nvidia_[i].empty() && !(s.nvidia_[i].back() < lines[l])) {
        return Status::Corruption(where + ":" + std::to_string(l + 1) + ": not sorted, or listed twice");
      }
      s.nvidia_[i].emplace_back(lines[l]);
    }
    s.phos_[i] = sources.phos[i];
    if (s.phos_[i]) std::sort(s.phos_[i]->exports.begin(), s.phos_[i]->exports.end());
  }

  std::vector<std::string_view> lines = Lines(sources.refusals);
  for (size_t l = 0; l < lines.size(); ++l) {
    const std::string where = "refused.tsv:" + std::to_string(l + 1);
    if (lines[l].empty() || lines[l][0] == '#') continue;
    std::vector<std::string_view> f = Split(lines[l], "\t");
    if (f.size() != 4 || f[0].empty() || f[2].empty() || f[3].empty()) {
      return Status::Corruption(where + ": want symbol<TAB>refused|partial<TAB>error<TAB>why");
    }
    if (f[1] != "refused" && f[1] != "partial") {
      return Status::Corruption(where + ": kind '" + std::string(f[1]) + "' is neither refused nor partial");
    }
    std::optional<size_t> library;
    for (size_t i = 0; i < kLibraryCount && !library; ++i) {
      if (Contains(s.nvidia_[i], f[0])) library = i;
    }
    if (!library)
      return Status::Corruption(where + ": " + std::string(f[0]) + " is no function of NVIDIA's lists");
    // A refusal of a function phos does not export would be a lie in every table made from it.
    const std::optional<PhosLibrary>& phos = s.phos_[*library];
    if (!phos || !Contains(phos->exports, f[0])) {
      return Status::Corruption(
          where + ": " + std::string(f[0]) + " is not exported by " +
          (phos ? phos->file() : "phos (it has no " + std::string(Libraries()[*library].soname) + ")"));
    }
    Refusal r{f[1] == "partial", std::string(f[2]), std::string(f[3])};
    if (!s.refusals_.emplace(std::string(f[0]), std::move(r)).second) {
      return Status::Corruption(where + ": " + std::string(f[0]) + " is listed twice");
    }
  }
  return s;
}

Result<Surface> Surface::Load(const std::string& frontend_lib_dir) {
  PHOS_ASSIGN_OR_RETURN(SurfaceSources sources, SurfaceSources::WithLibrariesIn(frontend_lib_dir));
  return Build(sources);
}

std::optional<size_t> Surface::LibraryOf(std::string_view function) const {
  for (size_t i = 0; i < kLibraryCount; ++i) {
    if (Contains(nvidia_[i], function)) return i;
  }
  // The longest prefix wins: "cublasLt" before "cublas".
  std::optional<size_t> best;
  size_t best_length = 0;
  for (size_t i = 0; i < kLibraryCount; ++i) {
    for (std::string_view prefix : Libraries()[i].prefixes) {
      if (function.substr(0, prefix.size()) == prefix && prefix.size() > best_length) {
        best = i;
        best_length = prefix.size();
      }
    }
  }
  return best;
}

FunctionState Surface::Lookup(std::string_view function, size_t library) const {
  FunctionState out;
  out.library = library;
  if (!phos_[library] || !Contains(phos_[library]->exports, function)) return out;  // lacks
  out.state = State::kServed;
  if (auto it = refusals_.find(function); it != refusals_.end()) {
    if (!it->second.partial) out.state = State::kRefused;
    out.error = it->second.error;
    out.note = it->second.why;
  }
  return out;
}

}  // namespace phos::surface
