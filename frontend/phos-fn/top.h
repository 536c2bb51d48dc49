// phos-fn top: each function's instances (GET /v1/functions) and the invocations by how their
// instance came up, with their time to the first byte (phosd's /metrics), as one frame.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace phos::fn_cli {

// One sample of the Prometheus text format: `name{labels} value`.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
// The samples of `text` (comments skipped; a line it cannot read is left out).
std::vector<MetricSample> ParseMetricsText(std::string_view text);

// A frame of top from phosd's answers: {"functions": [{"name", "version", "instances", "starting",
// "idle", "busy", "ending", "queued"}], "modes": [{"mode", "invocations", "first_byte_ms":
// {"mean", "p50", "p99"}}]} — the percentiles from the histogram's buckets (an upper bound: the
// bucket the rank falls in), absent for a mode with no first byte measured.
nlohmann::json TopFrame(const nlohmann::json& functions, const std::vector<MetricSample>& metrics);
// The frame as a table.
std::string RenderTop(const nlohmann::json& frame);

}  // namespace phos::fn_cli
