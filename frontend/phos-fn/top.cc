#include "top.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include <fmt/core.h>

namespace phos::fn_cli {
namespace {

// The upper bound of the bucket in which the `q` quantile of a histogram's cumulative `buckets`
// (le -> count, le ascending) falls; NaN when it holds nothing.
double Quantile(const std::vector<std::pair<double, double>>& buckets, double q) {
  if (buckets.empty() || buckets.back().second <= 0) return std::nan("");
  const double rank = q * buckets.back().second;
  for (const auto& [le, count] : buckets) {
    if (count >= rank) return le;
  }
  return buckets.back().first;
}

}  // namespace

nlohmann::json TopFrame(const nlohmann::json& functions, const std::vector<http::MetricSample>& metrics) {
  nlohmann::json frame = {{"functions", nlohmann::json::array()}, {"modes", nlohmann::json::array()}};
  if (functions.is_object() && functions.contains("functions") && functions["functions"].is_array()) {
    for (const nlohmann::json& f : functions["functions"]) {
      if (!f.is_object()) continue;
      const nlohmann::json state = f.value("state", nlohmann::json::object());
      frame["functions"].push_back({{"name", f.value("name", "")},
                                    {"version", f.value("version", 1)},
                                    {"instances", f.value("instances", 0)},
                                    {"starting", state.value("starting", 0)},
                                    {"idle", state.value("idle", 0)},
                                    {"busy", state.value("busy", 0)},
                                    {"ending", state.value("ending", 0)},
                                    {"queued", state.value("queued", 0)}});
    }
  }
  std::map<std::string, double> invocations;
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // mode -> (le, cumulative)
  std::map<std::string, std::pair<double, double>> sums;                  // mode -> (sum, count)
  for (const http::MetricSample& s : metrics) {
    auto mode = s.labels.find("mode");
    if (mode == s.labels.end()) continue;
    if (s.name == "phos_invocations_total") invocations[mode->second] += s.value;
    auto stage = s.labels.find("stage");
    if (stage == s.labels.end() || stage->second != "first-byte") continue;
    if (s.name == "phos_invocation_stage_seconds_bucket" && s.labels.count("le") != 0) {
      const std::string& le = s.labels.at("le");
      buckets[mode->second].emplace_back(le == "+Inf" ? std::numeric_limits<double>::infinity() : std::atof(le.c_str()),
                                         s.value);
    } else if (s.name == "phos_invocation_stage_seconds_sum") {
      sums[mode->second].first = s.value;
    } else if (s.name == "phos_invocation_stage_seconds_count") {
      sums[mode->second].second = s.value;
    }
  }
  for (const auto& [mode, count] : invocations) {
    nlohmann::json m = {{"mode", mode}, {"invocations", static_cast<uint64_t>(count)}};
    auto sum = sums.find(mode);
    if (sum != sums.end() && sum->second.second > 0) {
      std::vector<std::pair<double, double>>& b = buckets[mode];
      std::sort(b.begin(), b.end());
      m["first_byte_ms"] = {{"mean", 1e3 * sum->second.first / sum->second.second},
                            {"p50", 1e3 * Quantile(b, 0.5)},
                            {"p99", 1e3 * Quantile(b, 0.99)}};
    }
    frame["modes"].push_back(std::move(m));
  }
  return frame;
}

std::string RenderTop(const nlohmann::json& frame) {
  std::string out = fmt::format("{:<24} {:>7} {:>9} {:>8} {:>6} {:>6} {:>6} {:>6}\n", "FUNCTION", "VERSION", "INSTANCES",
                                "STARTING", "IDLE", "BUSY", "ENDING", "QUEUED");
  for (const nlohmann::json& f : frame["functions"]) {
    out += fmt::format("{:<24} {:>7} {:>9} {:>8} {:>6} {:>6} {:>6} {:>6}\n", f.value("name", ""), f.value("version", 0),
                       f.value("instances", 0), f.value("starting", 0), f.value("idle", 0), f.value("busy", 0),
                       f.value("ending", 0), f.value("queued", 0));
  }
  out += fmt::format("\n{:<16} {:>11} {:>26}\n", "MODE", "INVOCATIONS", "FIRST BYTE ms mean/p50/p99");
  for (const nlohmann::json& m : frame["modes"]) {
    std::string latency = "-";
    if (m.contains("first_byte_ms")) {
      const nlohmann::json& l = m["first_byte_ms"];
      // A percentile past the last finite bucket reads as "inf": beyond what the histogram resolves.
      auto ms = [](double v) { return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string("inf"); };
      latency = ms(l.value("mean", 0.0)) + " / " + ms(l.value("p50", 0.0)) + " / " + ms(l.value("p99", 0.0));
    }
    out += fmt::format("{:<16} {:>11} {:>26}\n", m.value("mode", ""), m.value("invocations", 0), latency);
  }
  return out;
}

}  // namespace phos::fn_cli
