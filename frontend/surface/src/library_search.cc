#include "phos/surface/library_search.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "phos/base/strings.h"
#include "phos/base/subprocess.h"
#include "phos/surface/elf_file.h"

namespace phos::surface {
namespace {

// `dir` with $ORIGIN expanded and an empty entry made the current directory; nullopt when it
// holds another dynamic string token.
std::optional<std::string> Expand(const std::string& dir, const std::string& origin) {
  if (dir.empty()) return ".";
  std::string out;
  for (size_t i = 0; i < dir.size();) {
    if (dir[i] != '$') {
      out += dir[i++];
      continue;
    }
    std::string_view rest = std::string_view(dir).substr(i);
    if (rest.starts_with("${ORIGIN}")) {
      out += origin;
      i += 9;
    } else if (rest.starts_with("$ORIGIN") &&
               (rest.size() == 7 || !(std::isalnum(static_cast<unsigned char>(rest[7])) || rest[7] == '_'))) {
      out += origin;
      i += 7;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::string InDirectory(const std::string& dir, std::string_view name) {
  return (dir.ends_with('/') ? dir : dir + "/") + std::string(name);
}

void AddDirs(const std::vector<std::string>& dirs, const std::string& origin, std::string_view needed,
             CandidateSource source, const std::string& named_by, std::vector<Candidate>* out) {
  for (const std::string& d : dirs) {
    if (std::optional<std::string> dir = Expand(d, origin)) {
      out->push_back({InDirectory(*dir, needed), source, named_by});
    }
  }
}

// The text a command prints, or why it could not be run.
Result<std::string> Output(std::vector<std::string> argv) {
  SpawnOptions o;
  o.argv = std::move(argv);
  PHOS_ASSIGN_OR_RETURN(CommandOutput out, RunCommand(o, std::chrono::seconds(30)));
  if (!out.status.success()) return Status::Unavailable(o.argv[0] + " " + out.status.ToString());
  return std::move(out.output);
}

}  // namespace

std::multimap<std::string, std::string, std::less<>> ParseLdconfigCache(std::string_view output) {
  std::multimap<std::string, std::string, std::less<>> cache;
  for (std::string_view line : Split(output, "\n")) {
    // Entries are indented; the first line ("N libs found in cache ...") is not.
    if (line.empty() || (line[0] != '\t' && line[0] != ' ')) continue;
    const size_t start = line.find_first_not_of(" \t");
    const size_t name_end = line.find(' ', start);
    const size_t arrow = line.find(" => ");
    if (name_end == std::string_view::npos || arrow == std::string_view::npos) continue;
    cache.emplace(std::string(line.substr(start, name_end - start)), std::string(line.substr(arrow + 4)));
  }
  return cache;
}

std::vector<std::string> ParseSystemSearchPath(std::string_view help) {
  constexpr std::string_view kMark = " (system search path)";
  std::vector<std::string> dirs;
  for (std::string_view line : Split(help, "\n")) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string_view::npos || !line.ends_with(kMark)) continue;
    dirs.emplace_back(line.substr(start, line.size() - kMark.size() - start));
  }
  return dirs;
}

std::string RunLibraryPath(const std::string& frontend_lib_dir) {
  const char* old = std::getenv("LD_LIBRARY_PATH");
  return old != nullptr && *old != '\0' ? frontend_lib_dir + ":" + old : frontend_lib_dir;
}

Result<LoaderEnvironment> LoaderEnvironment::ForPhosRun(const std::string& frontend_lib_dir) {
  LoaderEnvironment env;
  const std::string ld_library_path = RunLibraryPath(frontend_lib_dir);
  for (std::string_view dir : Split(ld_library_path, ":;")) env.ld_library_path.emplace_back(dir);
  if (const char* now = std::getenv("LD_BIND_NOW"); now != nullptr && *now != '\0') env.bind_now = true;

  // ldconfig lives in /sbin, which a user's PATH may not hold.
  PHOS_ASSIGN_OR_RETURN(std::string cache,
                        Output({access("/sbin/ldconfig", X_OK) == 0 ? "/sbin/ldconfig" : "ldconfig", "-p"}));
  env.cache = ParseLdconfigCache(cache);

  // The system search path is glibc's, per machine and distribution: the loader this process runs
  // under prints it (glibc 2.33 and later).
  PHOS_ASSIGN_OR_RETURN(ElfFile self, ReadElfFile("/proc/self/exe"));
  if (self.interpreter.empty()) return Status::Unavailable("this program names no dynamic loader");
  PHOS_ASSIGN_OR_RETURN(std::string help, Output({self.interpreter, "--help"}));
  env.system_dirs = ParseSystemSearchPath(help);
  if (env.system_dirs.empty()) {
    return Status::Unavailable(self.interpreter + " --help names no system search path (glibc before 2.33?)");
  }
  return env;
}

std::string DescribeSource(const Candidate& candidate) {
  switch (candidate.source) {
    case CandidateSource::kPath:
      return "the path DT_NEEDED gives";
    case CandidateSource::kRpath:
      return "the DT_RPATH of " + candidate.named_by;
    case CandidateSource::kLdLibraryPath:
      return "LD_LIBRARY_PATH";
    case CandidateSource::kRunpath:
      return "the DT_RUNPATH of " + candidate.named_by;
    case CandidateSource::kCache:
      return "the ld.so cache";
    case CandidateSource::kSystem:
      return "the system search path";
  }
  return "?";
}

std::vector<Candidate> CandidatePaths(std::string_view needed, const std::vector<SearchScope>& chain,
                                      const LoaderEnvironment& env) {
  std::vector<Candidate> out;
  if (needed.find('/') != std::string_view::npos) {
    out.push_back({std::string(needed), CandidateSource::kPath, ""});
    return out;
  }
  const SearchScope* requester = chain.empty() ? nullptr : &chain.front();
  if (requester != nullptr && requester->runpath.empty()) {
    for (const SearchScope& scope : chain) {
      if (!scope.runpath.empty()) continue;  // its DT_RPATH is ignored
      AddDirs(scope.rpath, scope.origin, needed, CandidateSource::kRpath, scope.file, &out);
    }
  }
  const std::string executable_origin = chain.empty() ? "" : chain.back().origin;
  AddDirs(env.ld_library_path, executable_origin, needed, CandidateSource::kLdLibraryPath, "", &out);
  if (requester != nullptr) {
    AddDirs(requester->runpath, requester->origin, needed, CandidateSource::kRunpath, requester->file, &out);
  }
  for (auto [it, end] = env.cache.equal_range(needed); it != end; ++it) {
    out.push_back({it->second, CandidateSource::kCache, ""});
  }
  for (const std::string& dir : env.system_dirs) {
    out.push_back({InDirectory(dir, needed), CandidateSource::kSystem, ""});
  }
  return out;
}

Result<std::string> FindProgram(const std::string& name, const char* path_variable) {
  if (name.find('/') != std::string::npos) return name;
  std::string path;
  if (path_variable != nullptr) {
    path = path_variable;
  } else {
    path.resize(confstr(_CS_PATH, nullptr, 0));
    confstr(_CS_PATH, path.data(), path.size());
    path.resize(path.find('\0'));
  }
  for (std::string_view dir : Split(path, ":")) {
    const std::string candidate = InDirectory(dir.empty() ? "." : std::string(dir), name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return Status::NotFound(name + ": no such program in PATH (" + path + ")");
}

}  // namespace phos::surface
