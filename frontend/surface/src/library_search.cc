#include "phos/surface/library_search.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>

#include "phos/base/subprocess.h"

namespace phos::surface {
namespace {

// `dir` with $ORIGIN expanded; nullopt when it holds another dynamic string token or is empty.
std::optional<std::string> Expand(const std::string& dir, const std::string& origin) {
  if (dir.empty()) return std::nullopt;
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

void AddDirs(const std::vector<std::string>& dirs, const std::string& origin, std::string_view needed,
             std::vector<std::string>* out) {
  for (const std::string& d : dirs) {
    if (std::optional<std::string> dir = Expand(d, origin)) out->push_back(*dir + "/" + std::string(needed));
  }
}

}  // namespace

std::multimap<std::string, std::string, std::less<>> ParseLdconfigCache(std::string_view output) {
  std::multimap<std::string, std::string, std::less<>> cache;
  while (!output.empty()) {
    size_t end = output.find('\n');
    std::string_view line = output.substr(0, end);
    output = end == std::string_view::npos ? std::string_view() : output.substr(end + 1);
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

Result<LoaderEnvironment> LoaderEnvironment::FromProcess() {
  LoaderEnvironment env;
  if (const char* path = std::getenv("LD_LIBRARY_PATH"); path != nullptr && *path != '\0') {
    std::string_view list(path);
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find_first_of(":;", start);
      if (end == std::string_view::npos) end = list.size();
      std::string entry(list.substr(start, end - start));
      env.ld_library_path.push_back(entry.empty() ? "." : entry);
      start = end + 1;
    }
  }
  if (const char* now = std::getenv("LD_BIND_NOW"); now != nullptr && *now != '\0') env.bind_now = true;

  // ldconfig lives in /sbin, which a user's PATH may not hold.
  SpawnOptions o;
  o.argv = {access("/sbin/ldconfig", X_OK) == 0 ? "/sbin/ldconfig" : "ldconfig", "-p"};
  PHOS_ASSIGN_OR_RETURN(CommandOutput out, RunCommand(o, std::chrono::seconds(30)));
  if (!out.status.success()) return Status::Unavailable("ldconfig -p " + out.status.ToString());
  env.cache = ParseLdconfigCache(out.output);
  return env;
}

std::vector<std::string> CandidatePaths(std::string_view needed, const std::vector<SearchScope>& chain,
                                        const LoaderEnvironment& env) {
  std::vector<std::string> out;
  if (needed.find('/') != std::string_view::npos) {
    out.emplace_back(needed);
    return out;
  }
  const SearchScope* requester = chain.empty() ? nullptr : &chain.front();
  if (requester != nullptr && requester->runpath.empty()) {
    for (const SearchScope& scope : chain) AddDirs(scope.rpath, scope.origin, needed, &out);
  }
  for (const std::string& dir : env.ld_library_path) out.push_back(dir + "/" + std::string(needed));
  if (requester != nullptr) AddDirs(requester->runpath, requester->origin, needed, &out);
  for (auto [it, end] = env.cache.equal_range(needed); it != end; ++it) out.push_back(it->second);
  for (const std::string& dir : env.default_dirs) out.push_back(dir + "/" + std::string(needed));
  return out;
}

}  // namespace phos::surface
