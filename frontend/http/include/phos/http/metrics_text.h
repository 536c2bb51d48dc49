// The Prometheus text exposition format (what GET /metrics answers), read back: its samples.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace phos::http {

// One sample: `name{labels} value`.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The samples of `text`, in order (comments skipped; a line it cannot read is left out).
std::vector<MetricSample> ParseMetricsText(std::string_view text);

}  // namespace phos::http
