// What the surface tests share: running a command (binutils, the loader, phos-fn) and a scratch
// directory. binutils' nm and readelf are the independent reference for what libelf reads.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/subprocess.h"

namespace phos::surface::testing {

struct Ran {
  int exit_code = -1;
  std::string out;  // standard output, with standard error when asked
};

inline Ran RunTool(std::vector<std::string> argv, std::vector<std::pair<std::string, std::string>> env = {},
                   bool with_stderr = false) {
  SpawnOptions o;
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.stderr_to_stdout = with_stderr;
  Result<CommandOutput> r = RunCommand(o, std::chrono::minutes(5));
  if (!r.ok()) {
    ADD_FAILURE() << o.argv[0] << ": " << r.status().ToString();
    return {};
  }
  return {r->status.ShellCode(), r->output};
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

inline std::string WithoutVersion(std::string name) {
  return name.substr(0, name.find('@'));
}

// The functions `nm -D --defined-only` lists for `path` (types T, W, i), without versions.
inline std::set<std::string> NmExports(const std::string& path) {
  std::set<std::string> out;
  for (const std::string& line : Lines(RunTool({"nm", "-D", "--defined-only", path}).out)) {
    std::vector<std::string> w = Words(line);
    if (w.size() == 3 && (w[1] == "T" || w[1] == "W" || w[1] == "i")) out.insert(WithoutVersion(w[2]));
  }
  return out;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteText(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A directory of its own, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "phos-surface-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace phos::surface::testing
