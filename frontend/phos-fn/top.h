// phos-fn top: each function's instances (GET /v1/functions) and the invocations by how their
// instance came up, with their time to the first byte (phosd's /metrics), as one frame.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "phos/http/metrics_text.h"

namespace phos::fn_cli {

// A frame of top from phosd's answers: {"functions": [{"name", "version", "instances", "starting",
// "idle", "busy", "ending", "queued"}], "modes": [{"mode", "invocations", "first_byte_ms":
// {"mean", "p50", "p99"}}]} — the percentiles from the histogram's buckets (an upper bound: the
// bucket the rank falls in), absent for a mode with no first byte measured.
nlohmann::json TopFrame(const nlohmann::json& functions, const std::vector<http::MetricSample>& metrics);
// The frame as a table.
std::string RenderTop(const nlohmann::json& frame);

}  // namespace phos::fn_cli
