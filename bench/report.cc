#include "report.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace phos::bench {

bool WriteSection(const std::string& path, const std::string& name, const std::string& markdown) {
  std::string begin = "<!-- bench:" + name + ":begin -->";
  std::string end = "<!-- bench:" + name + ":end -->";
  std::string text;
  {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) text = "# Benchmarks\n\nEach section is written by the benchmark it names; rerun the command to refresh it.\n";
  std::string section = begin + "\n" + markdown + end;
  size_t b = text.find(begin);
  size_t e = text.find(end);
  if (b != std::string::npos && e != std::string::npos && e > b) {
    text.replace(b, e + end.size() - b, section);
  } else {
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += "\n" + section + "\n";
  }
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

std::string NowUtc() {
  std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return buf;
}

std::string CommandLine(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

std::string HostShmemHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string word;
  while (in >> word) {
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') return word.substr(1, word.size() - 2);
  }
  return "unknown";
}

void WarnIfNoShmemHugePages(const char* program) {
  if (HostShmemHugePages() != "never") return;
  std::fprintf(stderr,
               "%s: shared-memory huge pages are off on this host; simgpu's device memory then pays 4 KiB host page "
               "faults and page-table updates a GPU does not (as root: echo advise > "
               "/sys/kernel/mm/transparent_hugepage/shmem_enabled)\n",
               program);
}

}  // namespace phos::bench
