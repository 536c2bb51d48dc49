#include "phos/http/metrics_text.h"

#include <cstdlib>
#include <sstream>

namespace phos::http {
namespace {

// `{a="x",b="y"}` (the braces excluded) into labels; false when malformed.
bool ParseLabels(std::string_view text, std::map<std::string, std::string>* labels) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t eq = text.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= text.size() || text[eq + 1] != '"') return false;
    std::string value;
    size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] == '\\' && j + 1 < text.size()) {
        ++j;
        value += text[j] == 'n' ? '\n' : text[j];
      } else {
        value += text[j];
      }
    }
    if (j >= text.size()) return false;
    (*labels)[std::string(text.substr(i, eq - i))] = std::move(value);
    i = j + 1;
    if (i < text.size() && text[i] == ',') ++i;
  }
  return true;
}

}  // namespace

std::vector<MetricSample> ParseMetricsText(std::string_view text) {
  std::vector<MetricSample> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    MetricSample s;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    if (brace != std::string::npos && brace < space) {
      const size_t close = line.rfind('}', space);
      if (close == std::string::npos || close < brace ||
          !ParseLabels(std::string_view(line).substr(brace + 1, close - brace - 1), &s.labels)) {
        continue;
      }
      s.name = line.substr(0, brace);
    } else {
      s.name = line.substr(0, space);
    }
    char* end = nullptr;
    const std::string value = line.substr(space + 1);
    s.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) continue;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace phos::http
