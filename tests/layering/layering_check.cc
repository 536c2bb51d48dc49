// layering_check: the Layering test. Checks every #include "phos/..." in the tree and every link
// between two of the project's targets against the allowed graph in cmake/layers.txt (format at
// the top of that file). Prints one line per edge the graph does not allow and exits 1 if there
// is any, 2 if an input cannot be read or the graph file is malformed.
//
//   layering_check --root <repository> --graph <layers.txt> --links <target_links.txt>
//
// The links file is written at configure time by phos_write_target_links()
// (cmake/PhosLayers.cmake): "<target>\t<folder>\t<linked target>\t<its folder>" per line.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Graph {
  std::map<std::string, std::string> folder_component;  // folder -> component
  std::map<std::string, std::string> header_component;  // include prefix -> component
  std::map<std::string, std::set<std::string>> uses;    // component -> what it may use
  std::map<std::string, std::set<std::string>> header_exceptions;
  std::map<std::string, std::set<std::string>> target_exceptions;
  std::set<std::string> external_targets;
  std::set<std::string> ignored_folders;
};

// The value in `map` whose key is the longest prefix of `path` (for folders: a whole path
// component), or "" if none.
std::string LongestPrefixMatch(const std::map<std::string, std::string>& map, const std::string& path,
                               bool whole_component) {
  std::string best_key;
  std::string best;
  for (const auto& [key, value] : map) {
    if (path.compare(0, key.size(), key) != 0) continue;
    if (whole_component && path.size() > key.size() && path[key.size()] != '/') continue;
    if (key.size() > best_key.size()) {
      best_key = key;
      best = value;
    }
  }
  return best;
}

bool ParseGraph(const fs::path& file, Graph* graph, std::string* error) {
  std::ifstream in(file);
  if (!in) {
    *error = "cannot read " + file.string();
    return false;
  }
  std::set<std::string> components;
  std::vector<std::pair<int, std::string>> referenced;  // (line, component) checked at the end
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    const std::string where = file.string() + ":" + std::to_string(number) + ": ";
    if (w[0] == "component" && w.size() >= 3) {
      components.insert(w[1]);
      for (size_t i = 2; i < w.size(); ++i) graph->folder_component[w[i]] = w[1];
    } else if (w[0] == "header" && w.size() == 3) {
      graph->header_component[w[1]] = w[2];
      referenced.emplace_back(number, w[2]);
    } else if (w[0] == "uses" && w.size() >= 3) {
      referenced.emplace_back(number, w[1]);
      auto& allowed = graph->uses[w[1]];
      for (size_t i = 2; i < w.size(); ++i) {
        if (w[i] == "-") continue;
        allowed.insert(w[i]);
        if (w[i] != "*") referenced.emplace_back(number, w[i]);
      }
    } else if (w[0] == "except" && w.size() == 4 && (w[2] == "header" || w[2] == "target")) {
      referenced.emplace_back(number, w[1]);
      (w[2] == "header" ? graph->header_exceptions : graph->target_exceptions)[w[1]].insert(w[3]);
    } else if (w[0] == "external" && w.size() == 2) {
      graph->external_targets.insert(w[1]);
    } else if (w[0] == "ignore" && w.size() >= 2) {
      graph->ignored_folders.insert(w.begin() + 1, w.end());
    } else {
      *error = where + "cannot parse '" + line + "'";
      return false;
    }
  }
  for (const auto& [number, component] : referenced) {
    if (!components.contains(component)) {
      *error = file.string() + ":" + std::to_string(number) + ": unknown component '" + component + "'";
      return false;
    }
  }
  for (const auto& component : components) {
    if (!graph->uses.contains(component)) {
      *error = file.string() + ": component '" + component + "' has no 'uses' line";
      return false;
    }
  }
  return true;
}

class Checker {
 public:
  explicit Checker(Graph graph) : graph_(std::move(graph)) {}

  // Whether `from` may use `to` (includes and links); `exception` names the header or target.
  bool Allowed(const std::string& from, const std::string& to, const std::string& exception,
               bool is_header) const {
    if (from == to) return true;
    const auto& uses = graph_.uses.at(from);
    if (uses.contains("*") || uses.contains(to)) return true;
    const auto& exceptions = is_header ? graph_.header_exceptions : graph_.target_exceptions;
    auto it = exceptions.find(from);
    return it != exceptions.end() && it->second.contains(exception);
  }

  void Report(const std::string& message) {
    std::cout << "layering: " << message << "\n";
    ++violations_;
  }

  std::string AllowedList(const std::string& component) const {
    std::string list;
    for (const auto& use : graph_.uses.at(component)) list += (list.empty() ? "" : " ") + use;
    return list.empty() ? "nothing" : list;
  }

  void CheckIncludes(const fs::path& root) {
    static const std::regex kInclude(R"(^\s*#\s*include\s*["<](phos/[^">]+)[">])");
    static const std::set<std::string> kSourceExtensions = {".h",  ".hh",  ".hpp", ".c",
                                                            ".cc", ".cpp", ".cu",  ".cuh"};
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
      const fs::path rel = fs::relative(it->path(), root);
      if (it->is_directory()) {
        // Hidden folders, build trees (wherever they are) and folders of no component's code.
        if (rel.filename().string().starts_with(".") || fs::exists(it->path() / "CMakeCache.txt") ||
            graph_.ignored_folders.contains(rel.string())) {
          it.disable_recursion_pending();
        }
        continue;
      }
      if (!it->is_regular_file() || !kSourceExtensions.contains(rel.extension().string())) continue;
      const std::string component = LongestPrefixMatch(graph_.folder_component, rel.string(), true);
      if (component.empty()) {
        Report(rel.string() + ": belongs to no component (add its folder to cmake/layers.txt)");
        continue;
      }
      ++files_;
      std::ifstream in(it->path());
      std::string line;
      std::smatch match;
      for (int number = 1; std::getline(in, line); ++number) {
        if (!std::regex_search(line, match, kInclude)) continue;
        const std::string header = match[1];
        const std::string used = LongestPrefixMatch(graph_.header_component, header, false);
        const std::string where = rel.string() + ":" + std::to_string(number) + ": ";
        if (used.empty()) {
          Report(where + header + " is no component's header (add it to cmake/layers.txt)");
        } else if (!Allowed(component, used, header, true)) {
          Report(where + component + " -> " + used + " (includes " + header + "); " + component +
                 " may use: " + AllowedList(component));
        }
      }
    }
  }

  void CheckLinks(const fs::path& root, const fs::path& links_file, std::string* error) {
    std::ifstream in(links_file);
    if (!in) {
      *error = "cannot read " + links_file.string() + " (written when CMake configures the build)";
      return;
    }
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> fields;
      std::istringstream split(line);
      for (std::string field; std::getline(split, field, '\t');) fields.push_back(field);
      if (fields.size() != 4) {
        *error = links_file.string() + ": cannot parse '" + line + "'";
        return;
      }
      ++links_;
      const std::string from = TargetComponent(root, fields[0], fields[1]);
      const std::string to = TargetComponent(root, fields[2], fields[3]);
      if (from.empty() || to.empty() || to == "<external>" || from == "<external>") continue;
      if (!Allowed(from, to, fields[2], false)) {
        Report("target " + fields[0] + " (" + from + ") links " + fields[2] + " (" + to + "); " + from +
               " may use: " + AllowedList(from));
      }
    }
  }

  int violations() const { return violations_; }
  int files() const { return files_; }
  int links() const { return links_; }

 private:
  // The component a target belongs to: its folder's, "<external>" if the graph says so, ""
  // (reported) if neither.
  std::string TargetComponent(const fs::path& root, const std::string& target, const std::string& folder) {
    if (graph_.external_targets.contains(target)) return "<external>";
    const std::string rel = fs::path(folder).lexically_relative(root).string();
    std::string component = LongestPrefixMatch(graph_.folder_component, rel, true);
    if (component.empty() && unplaced_targets_.insert(target).second) {
      Report("target " + target + " (defined in '" + rel + "') belongs to no component");
    }
    return component;
  }

  Graph graph_;
  std::set<std::string> unplaced_targets_;
  int violations_ = 0;
  int files_ = 0;
  int links_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  if (argc != 7 || !args.contains("--root") || !args.contains("--graph") || !args.contains("--links")) {
    std::cerr
        << "usage: layering_check --root <repository> --graph <layers.txt> --links <target_links.txt>\n";
    return 2;
  }
  const fs::path root = fs::canonical(args["--root"]);
  Graph graph;
  std::string error;
  if (!ParseGraph(args["--graph"], &graph, &error)) {
    std::cerr << "layering_check: " << error << "\n";
    return 2;
  }
  Checker checker(std::move(graph));
  checker.CheckIncludes(root);
  checker.CheckLinks(root, args["--links"], &error);
  if (!error.empty()) {
    std::cerr << "layering_check: " << error << "\n";
    return 2;
  }
  std::cout << "layering: " << checker.files() << " files, " << checker.links() << " links between targets, "
            << checker.violations() << " edges not in " << args["--graph"] << "\n";
  return checker.violations() == 0 ? 0 : 1;
}
