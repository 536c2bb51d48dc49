// What remote_tier_bench's two parts share: its options, and the cluster part
// (remote_tier_cluster.cc) as the store part and the report call it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phosd_harness.h"

namespace phos::bench {

struct Options {
  int mib = 512;
  int reps = 3;
  std::vector<int> parallel{1, 4, 8, 16};
  int function_mib = 256;
  int cold_starts = 5;
  bool store_part = true;
  bool cluster_part = true;
  std::string dir = "/var/tmp";
  bool keep_logs = false;
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
};

inline double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// ---- Part 2: two phosd as one cluster ----

struct ColdStart {
  double wall_ms = 0;
  std::optional<double> first_byte_ms;  // modelled (the stage header / time scale)
  std::string served;
  std::map<std::string, double> stages;  // every X-Phos-Stage-*-Us, modelled ms
  std::string shared_bytes;              // X-Phos-Shared-Bytes, as sent
};

struct ImportLog {
  int imports = 0;  // one per instance range
  uint64_t fetched_chunks = 0, chunks = 0, bytes = 0;
  double seconds = 0;
  // From the adoption's start to its deploy's end (imports, runs to the entry point, the warm
  // instance restored), by the log's timestamps; nullopt when a line is missing.
  std::optional<double> adoption_s;
};

struct ClusterResult {
  bool ran = false;
  std::string skipped;
  mlp::Shape shape;
  uint64_t snapshot_bytes = 0;  // of A's snapshot, buffers only
  double deploy_s = 0;          // phos-fn deploy on A, sample included
  double recorded_s = 0;        // from the deploy's return to the record in the registry
  ColdStart adoption;           // B's first invocation
  std::optional<ImportLog> imported;
  std::vector<ColdStart> b, a;
};

// Runs part 2 with the time scale the device runs at: skipped (ran false, skipped saying why)
// without etcd or s3rver.
Result<ClusterResult> RunClusterPart(const Options& o, double scale);
// Its section of the report.
std::string ClusterMarkdown(const ClusterResult& c, const Options& o, double scale);

}  // namespace phos::bench
