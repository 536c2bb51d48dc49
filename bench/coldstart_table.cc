#include "coldstart_table.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "report.h"

namespace phos::bench {
namespace {

std::string Ms(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.1f}", v);
}
std::string MsFine(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.2f}", v);
}
std::string Ratio(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.2f}", v);
}

double Max(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

// "phos 30" or "phos 28, warm 2": the modes that served the requests.
std::string Served(const ScenarioResult& s) {
  std::map<std::string, int> modes;
  for (const ColdStart& c : s.requests) ++modes[c.served];
  std::string out;
  for (const auto& [mode, n] : modes) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", mode, n);
  return out.empty() ? "—" : out;
}

bool AnyRequestHas(const std::vector<SizeResult>& results, const std::string& stage) {
  for (const SizeResult& r : results) {
    for (const ScenarioResult& s : r.scenarios) {
      if (!s.Stage(stage).empty()) return true;
    }
  }
  return false;
}

// Pool waits: how many requests waited for a context, and the longest wait. A request without the
// header did not wait, once this phosd is known to report the stage at all.
std::string PoolWaits(const ScenarioResult& s, bool known) {
  if (!known) return "—";
  std::vector<double> waits = s.Stage(kPoolWaitStage);
  long waited = std::count_if(waits.begin(), waits.end(), [](double ms) { return ms > 0; });
  if (waited == 0) return "0";
  return fmt::format("{} (max {})", waited, MsFine(Max(waits)));
}

std::string RangeWaitMax(const ScenarioResult& s, bool known) {
  if (!known) return "—";
  std::vector<double> waits = s.Stage(kRangeWaitStage);
  return waits.empty() ? "0" : MsFine(Max(waits));
}

std::string Eviction(const ScenarioResult& s) {
  if (!s.evictions) return "—";
  if (*s.evictions == 0 || !s.eviction_mean_ms) return "none";
  return fmt::format("{} ({:.0f})", MsFine(*s.eviction_mean_ms), *s.evictions);
}

const char* ScenarioParagraph() {
  return "Scenarios, each with at least the stated number of requests per size, every answer byte-identical "
         "to the warm answer (itself checked against the CPU reference):\n\n"
         "- **(a) after deploy**: `phos-fn deploy mlp-<size>-a<i> ... --instances 1 --max-instances 2 "
         "--sample '{\"seed\": 1}'`, and the moment it returns one forced restore (`X-Phos-Restore-Mode: "
         "phos`); then `phos-fn rm`. Each request meets a pool and instance ranges just used by the "
         "deploy's capture and sample.\n"
         "- **(b) back to back**: one function (`--instances 1 --max-instances 2`), forced restores sent one "
         "after another, the next as soon as the previous answered, while the previous extra instance may "
         "still hold its range and context.\n"
         "- **(c) burst of N**: one function (`--instances 1 --max-instances <max>`); once only the warm "
         "instance is left (the extras ended by keep-alive), N forced restores at once, repeated until the "
         "N has its requests.\n"
         "- **(d) after scale to zero**: `--instances 0 --max-instances 2`; each request, in the default "
         "mode, once the function has no instance left (keep-alive expired); the served column says how "
         "phosd brought it up.\n\n";
}

}  // namespace

std::vector<double> ScenarioResult::Stage(const std::string& stage) const {
  std::vector<double> v;
  for (const ColdStart& c : requests) {
    if (auto it = c.stage_ms.find(stage); it != c.stage_ms.end()) v.push_back(it->second);
  }
  return v;
}

double SizeResult::Bound(const ScenarioResult& s) const {
  if (s.scenario == 'c') return s.burst * transfer_ms + compute_ms + kBoundFloorMs;
  return BoundMs(transfer_ms, compute_ms);
}

std::vector<std::string> MissedTargets(const SizeResult& size, const ScenarioResult& s) {
  std::vector<std::string> missed;
  if (!s.unavailable.empty() || s.requests.empty()) return missed;
  std::vector<double> first_byte = s.Stage("first-byte");
  double bound = size.Bound(s);
  if (!(Percentile(first_byte, 99) <= kP99Target * bound)) missed.push_back("p99");
  if (!(Max(first_byte) <= kMaxTarget * bound)) missed.push_back("max");
  // Requests served without a lease (none in a cold start) have no lease stage to judge.
  std::vector<double> lease = s.Stage("lease");
  if (!lease.empty() && !(Percentile(lease, 99) <= kLeaseP99TargetMs)) missed.push_back("lease p99");
  return missed;
}

std::string ScenarioName(const ScenarioResult& s) {
  switch (s.scenario) {
    case 'a':
      return "(a) after deploy";
    case 'b':
      return "(b) back to back";
    case 'c':
      return fmt::format("(c) burst of {}", s.burst);
    case 'd':
      return "(d) after scale to zero";
  }
  return std::string(1, s.scenario);
}

std::string ColdStartMarkdown(const std::vector<SizeResult>& results, const RunInfo& info) {
  const bool pool_wait_known = AnyRequestHas(results, kPoolWaitStage);
  const bool range_wait_known = AnyRequestHas(results, kRangeWaitStage);
  std::string md = fmt::format(
      "## Cold starts as users meet them ({})\n\n"
      "Command: `PHOS_SIMGPU_PROFILE={} {}` (time scale {}; {})\n\n"
      "One phosd with the default pool settings and `--keep-alive-ms {}`; mlp with {} layers, each request "
      "`{{\"seed\": 7}}`. Latency = `X-Phos-Stage-First-Byte-Us` / time scale (modelled ms from the "
      "request's arrival in phosd); p99 is the nearest-rank percentile, so of fewer than 100 requests it is "
      "their maximum. Bound (docs/design.md, \"The bound\") = max(B/W, E) + {} ms for one cold start and "
      "N·B/W + E + {} ms for a burst of N, whose loads share the host-to-device link: B = the snapshot's "
      "buffer bytes (mlp reads all its weights), W = the profile's pinned H2D bandwidth ({:.1f} GB/s, "
      "`phosSimGetProfile`), E = the warm latency measured here (median of 5).\n\n",
      info.profile, info.profile, info.command, info.time_scale, NowUtc(), info.keep_alive_ms, info.layers,
      kBoundFloorMs, kBoundFloorMs, info.h2d_bps / 1e9);
  if (!info.prefault.empty()) {
    md += fmt::format(
        "phosd's simulated device allocates {} of device memory's host pages when it starts "
        "(`PHOS_SIMGPU_PREFAULT`): a GPU's memory is there before anything is loaded into it, and the "
        "first touch of host pages would otherwise charge the first restores with host work the device does "
        "not have (docs/decisions.md, issue 18).\n\n",
        info.prefault);
  }
  md += ScenarioParagraph();
  md += fmt::format(
      "Beside each: the lease stage's p99; pool waits (`X-Phos-Stage-Pool-Wait-Us`: requests that waited "
      "for a context, and the longest wait); the longest range wait (`X-Phos-Stage-Range-Wait-Us`); pool "
      "misses (`phos_ctxpool_lease_misses_total` over the scenario, deploys' sessions included); eviction "
      "(the mean of `phos_instance_retire_seconds` over the scenario, modelled ms, and how many ended). "
      "\"—\": this phosd does not report it. Targets (issue 18): p99 ≤ {}x the bound, max ≤ {}x, lease p99 "
      "≤ {} ms; burst sizes up to `--max-instances` {}.\n",
      kP99Target, kMaxTarget, kLeaseP99TargetMs, info.max_instances);

  std::vector<std::string> misses;
  std::vector<std::string> unavailable;
  for (const SizeResult& r : results) {
    md += fmt::format(
        "\n### mlp {} MiB (width {} x {} layers)\n\n"
        "B = {} bytes in {} buffers ({} with a first-touch rank); B/W = {:.1f} ms; E = {:.1f} ms\n\n"
        "| scenario | requests | served | bound (ms) | first byte p50 / p99 / max (ms) | ÷ bound "
        "| lease p99 | pool waits | range wait max | pool misses | eviction | targets |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        r.size_mib, r.shape.width, r.shape.layers, r.snapshot.buffer_bytes, r.snapshot.buffers,
        r.snapshot.ranked, r.transfer_ms, r.compute_ms);
    for (const ScenarioResult& s : r.scenarios) {
      std::string name = ScenarioName(s);
      if (!s.unavailable.empty()) {
        md += fmt::format("| {} | — | — | — | not available: {} | | | | | | | — |\n", name, s.unavailable);
        unavailable.push_back(fmt::format("{} MiB {}", r.size_mib, name));
        continue;
      }
      std::vector<double> fb = s.Stage("first-byte");
      double bound = r.Bound(s);
      double p50 = Percentile(fb, 50), p99 = Percentile(fb, 99), max = Max(fb);
      std::vector<std::string> missed = MissedTargets(r, s);
      std::string verdict = "met";
      if (!missed.empty()) {
        verdict = "missed: " + missed.front();
        for (size_t i = 1; i < missed.size(); ++i) verdict += ", " + missed[i];
        misses.push_back(fmt::format("{} MiB {}", r.size_mib, name));
      }
      md += fmt::format(
          "| {} | {} | {} | {:.1f} | {} / {} / {} | {} / {} / {} | {} | {} | {} | {} | {} | {} |\n", name,
          s.requests.size(), Served(s), bound, Ms(p50), Ms(p99), Ms(max), Ratio(p50 / bound),
          Ratio(p99 / bound), Ratio(max / bound), MsFine(Percentile(s.Stage("lease"), 99)),
          PoolWaits(s, pool_wait_known), RangeWaitMax(s, range_wait_known),
          s.pool_misses ? fmt::format("{:.0f}", *s.pool_misses) : "—", Eviction(s), verdict);
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : "; ") + s;
    return out;
  };
  md += fmt::format("\nTargets in every measured scenario: **{}**{}.", misses.empty() ? "met" : "missed",
                    misses.empty() ? "" : " (" + join(misses) + ")");
  if (!unavailable.empty()) md += fmt::format(" Not measured: {}.", join(unavailable));
  md += "\n";
  return md;
}

}  // namespace phos::bench
