// The cold-start benchmark's results and their markdown table: per size and scenario, the
// first-byte latency's p50, p99 and max against the bound, with the lease stage, pool and range
// waits, pool misses and eviction time beside them, and the targets of issue 18 marked met or
// missed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mlp_model.h"
#include "phosd_harness.h"

namespace phos::bench {

constexpr double kP99Target = 1.25;        // issue 18: p99 <= 1.25x the bound
constexpr double kMaxTarget = 1.5;         // issue 18: max <= 1.5x the bound
constexpr double kLeaseP99TargetMs = 1.0;  // issue 18: the lease stage's p99 <= 1 ms modelled

// One measured request.
struct ColdStart {
  std::map<std::string, double> stage_ms;  // every X-Phos-Stage-<stage>-Us phosd sent, modelled ms
  std::string served;                      // X-Phos-Restore-Mode
};

// One scenario (for bursts: one burst size) of one size.
struct ScenarioResult {
  char scenario = 'a';      // 'a' after deploy, 'b' back to back, 'c' burst, 'd' after scale to zero
  int burst = 1;            // N simultaneous requests ('c'); 1 otherwise
  std::string unavailable;  // not empty: the scenario could not be run, and why
  std::vector<ColdStart> requests;
  // Deltas over the scenario of /metrics counters; nullopt when this phosd does not export them.
  std::optional<double> pool_misses;       // phos_ctxpool_lease_misses_total
  std::optional<double> evictions;         // phos_instance_retire_seconds_count
  std::optional<double> eviction_mean_ms;  // _sum / _count of the same histogram, modelled ms

  // The stage's values over the requests that carry it.
  std::vector<double> Stage(const std::string& stage) const;
};

struct SizeResult {
  int size_mib = 0;
  mlp::Shape shape;
  SnapshotSize snapshot;   // B = snapshot.buffer_bytes
  double transfer_ms = 0;  // B / W
  double compute_ms = 0;   // E: the warm latency, median of 5
  std::vector<ScenarioResult> scenarios;

  // max(B/W, E) + floor for one cold start; N·B/W + E + floor for a burst of N, whose loads share
  // the one host-to-device link.
  double Bound(const ScenarioResult& s) const;
};

// What the run had and what it was run with, for the report's heading.
struct RunInfo {
  std::string command;
  std::string profile;
  double time_scale = 0;
  double h2d_bps = 0;  // W
  int layers = 0;
  int max_instances = 0;
  int keep_alive_ms = 0;
  std::string prefault;  // PHOS_SIMGPU_PREFAULT phosd ran with; empty: none
};

// The stages phosd reports only once the pool wait and range wait are their own stages; "—" in
// the table when no request of the whole run carried them (a phosd that predates them).
inline constexpr char kPoolWaitStage[] = "pool-wait";
inline constexpr char kRangeWaitStage[] = "range-wait";

// The targets a scenario missed ("p99", "max", "lease p99"); empty when it met them all or was
// not run.
std::vector<std::string> MissedTargets(const SizeResult& size, const ScenarioResult& s);

std::string ScenarioName(const ScenarioResult& s);

std::string ColdStartMarkdown(const std::vector<SizeResult>& results, const RunInfo& info);

}  // namespace phos::bench
