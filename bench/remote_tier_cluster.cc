// remote_tier_bench's part 2 (remote_tier_bench.cc says what it measures): an etcd, an s3rver and
// two phosd on loopback; mlp deployed on A, adopted by B on its first invocation, then forced
// cold starts on both.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "etcd.h"
#include "phos/base/log.h"
#include "phos/base/status.h"
#include "phos/cluster/etcd.h"
#include "phos/store/manifest.h"
#include "phos/store/store.h"
#include "phosd_harness.h"
#include "s3rver.h"

#include "remote_tier.h"

namespace phos::bench {
namespace {

// Part 2: as coldstart_bench deploys and invokes mlp.
constexpr int kLayers = 4;
constexpr uint64_t kRequestSeed = 7;
const char* const kRequest = R"({"seed": 7})";
const char* const kSample = R"({"seed": 1})";
constexpr int kMaxInstances = 2;
constexpr int kKeepAliveMs = 1500;
constexpr std::chrono::seconds kSettleLimit{600};

class ClusterBench {
 public:
  ClusterBench(const Options& o, double scale) : o_(o), scale_(scale) {}

  Result<ClusterResult> Run() {
    ClusterResult r;
    testing::EtcdServer etcd;
    testing::S3rver s3;
    for (std::string why : {etcd.Start(), s3.Start("phos-cluster")}) {
      if (why.empty()) continue;
      if (why.find("not installed") == std::string::npos) return Status::Unavailable(why);
      r.skipped = why;
      std::printf("cluster part skipped: %s\n", why.c_str());
      return r;
    }
    r.ran = true;
    r.shape = mlp::ShapeForSize(static_cast<size_t>(o_.function_mib), kLayers, 1);
    // Each phosd inherits these: the bucket's credentials (s3rver's own account) and simgpu's
    // pages allocated ahead for what one node holds at most — a capture, the sample, the warm
    // instance and a forced restore — with room to spare.
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("PHOS_SIMGPU_PREFAULT", fmt::format("{}M", o_.function_mib * (kMaxInstances + 4)).c_str(), 0);
    Daemon a, b;
    auto start = [&](Daemon& d, const std::string& node) -> Status {
      PHOS_RETURN_IF_ERROR(d.Start("remote-tier-" + node,
                                   {"--etcd", etcd.endpoint(), "--s3-endpoint", s3.endpoint(), "--s3-bucket",
                                    "phos-cluster", "--node-name", node, "--keep-alive-ms",
                                    std::to_string(kKeepAliveMs)}));
      std::printf("phosd %s at %s, log %s\n", node.c_str(), d.endpoint().c_str(), d.log_path().c_str());
      return Status::Ok();
    };
    Status status = start(a, "node-a");
    if (status.ok()) status = start(b, "node-b");
    if (status.ok()) {
      // Both pools make their first contexts at once: a creation is mostly the device's modelled
      // time, which two daemons wait out side by side rather than one after the other.
      std::printf("waiting for both context pools\n");
      Status b_rest;
      std::thread other([&] { b_rest = b.WaitPoolAtRest(std::chrono::minutes(10)).status(); });
      status = a.WaitPoolAtRest(std::chrono::minutes(10)).status();
      other.join();
      if (status.ok()) status = b_rest;
    }
    if (status.ok()) status = Measure(etcd, a, b, &r);
    if (!status.ok()) {
      return status.WithContext(fmt::format("(logs: A {}, B {})", a.log_path(), b.log_path()));
    }
    // B's log says what the adoption fetched, one line per instance range.
    r.imported = ParseImports(b.log_path());
    if (o_.keep_logs) {
      a.Stop();
      b.Stop();
      std::printf("phosd logs kept: %s, %s\n", a.log_path().c_str(), b.log_path().c_str());
    } else {
      a.RemoveDirectories();
      b.RemoveDirectories();
    }
    return r;
  }

 private:
  Status Measure(const testing::EtcdServer& etcd, Daemon& a, Daemon& b, ClusterResult* r) {
    std::printf("\n== mlp %d MiB (width %d x %d layers) deployed on A\n", o_.function_mib, r->shape.width,
                r->shape.layers);
    Clock::time_point t = Clock::now();
    PHOS_ASSIGN_OR_RETURN(std::string out,
                          bench::Run({PHOS_PHOS_FN, "--endpoint", a.endpoint(), "deploy", "mlp", PHOS_MLP_FUNCTION,
                               "--instances", "1", "--max-instances", std::to_string(kMaxInstances), "--sample",
                               kSample, "--", "--size-mib", std::to_string(o_.function_mib), "--layers",
                               std::to_string(kLayers)}));
    r->deploy_s = Seconds(t);
    if (out.find("sample request served; first-touch order learned") == std::string::npos) {
      return Status::Internal("deploy on A: the sample request was not served: " + out);
    }
    PHOS_ASSIGN_OR_RETURN(SnapshotSize size, ReadSnapshotSize(a.data_dir(), "mlp"));
    r->snapshot_bytes = size.buffer_bytes;
    // The answer every later one must equal, checked against the CPU reference.
    PHOS_ASSIGN_OR_RETURN(HttpResponse warm, Invoke(a, "warm"));
    PHOS_RETURN_IF_ERROR(CheckMlpReference(warm.body, r->shape, kRequestSeed));
    expected_ = warm.body;
    // A publishes the record once its snapshots are in the bucket.
    PHOS_ASSIGN_OR_RETURN(cluster::Etcd registry, cluster::Etcd::Make(etcd.Options()));
    t = Clock::now();
    while (true) {
      Result<std::optional<cluster::KeyValue>> kv = registry.Get("/phos/functions/mlp");
      if (kv.ok() && kv->has_value()) break;
      if (Seconds(t) > 600) return Status::Timeout("A's record of mlp never reached the registry");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    r->recorded_s = Seconds(t);
    std::printf("deployed in %.1f s; the record in the registry %.2f s after\n", r->deploy_s, r->recorded_s);

    std::printf("\n== B's first invocation: adoption\n");
    PHOS_ASSIGN_OR_RETURN(r->adoption, ColdStartOn(b, ""));
    std::string stages;
    for (const auto& [stage, ms] : r->adoption.stages) stages += fmt::format(" {} {:.2f}", stage, ms);
    std::printf("B first: %.2f s wall, served %s; modelled ms from its admission:%s\n", r->adoption.wall_ms / 1e3,
                r->adoption.served.c_str(), stages.c_str());
    std::printf("\n== forced cold starts on B, then on A\n");
    for (auto [d, out, label] : {std::tuple{&b, &r->b, "B"}, std::tuple{&a, &r->a, "A"}}) {
      for (int i = 0; i < o_.cold_starts; ++i) {
        PHOS_RETURN_IF_ERROR(Settle(*d));
        PHOS_ASSIGN_OR_RETURN(ColdStart c, ColdStartOn(*d, "phos"));
        std::string stages;
        for (const auto& [stage, ms] : c.stages) stages += fmt::format(" {} {:.2f}", stage, ms);
        std::printf("  %s %d/%d: wall %.1f ms; modelled ms:%s; shared bytes %s\n", label, i + 1, o_.cold_starts,
                    c.wall_ms, stages.c_str(), c.shared_bytes.empty() ? "-" : c.shared_bytes.c_str());
        std::fflush(stdout);
        out->push_back(c);
      }
    }
    return Status::Ok();
  }

  // The warm instance alone and idle, the pool with a scrubbed context ready: the state before
  // each forced restore of restore_bench.
  Status Settle(Daemon& d) {
    PHOS_RETURN_IF_ERROR(d.WaitInstances(
        "mlp",
        [](const InstanceCounts& n) {
          return n.idle == 1 && n.busy == 0 && n.starting == 0 && n.ending == 0 && n.queued == 0;
        },
        kSettleLimit, "only the warm instance"));
    return d.WaitSettled("mlp", kSettleLimit);
  }

  Result<HttpResponse> Invoke(Daemon& d, const std::string& mode) {
    std::vector<std::string> headers = {"X-Phos-Timeout-Ms: 600000"};
    if (!mode.empty()) headers.push_back("X-Phos-Restore-Mode: " + mode);
    PHOS_ASSIGN_OR_RETURN(HttpResponse r, Http(d.endpoint() + "/v1/functions/mlp/invoke", kRequest, headers));
    const std::string label = mode.empty() ? "default-mode" : mode;
    if (r.status != 200) return Status::Internal(fmt::format("{} invoke: HTTP {}: {}", label, r.status, r.body));
    const std::string served = r.headers["x-phos-restore-mode"];
    if (!mode.empty() && served != mode) return Status::Internal(fmt::format("asked for {}, served as '{}'", mode, served));
    if (!expected_.empty() && r.body != expected_) {
      return Status::Internal(fmt::format("{} answered {} where A's warm instance answered {}", label, r.body, expected_));
    }
    return r;
  }

  Result<ColdStart> ColdStartOn(Daemon& d, const std::string& mode) {
    const Clock::time_point t = Clock::now();
    PHOS_ASSIGN_OR_RETURN(HttpResponse r, Invoke(d, mode));
    ColdStart c;
    c.wall_ms = Seconds(t) * 1e3;
    c.first_byte_ms = StageMs(r, "first-byte", scale_);
    c.served = r.headers["x-phos-restore-mode"];
    c.stages = AllStagesMs(r, scale_);
    c.shared_bytes = r.headers["x-phos-shared-bytes"];
    return c;
  }

  // What B's log says of the adoption: each import's line, and when the adoption began and its
  // deploy ended ("[HH:MM:SS.mmm]" at the head of each line).
  static std::optional<ImportLog> ParseImports(const std::string& log_path) {
    std::ifstream in(log_path);
    const std::regex imported(
        R"(imported from the remote tier as \S+ v\d+: (\d+) of (\d+) chunks fetched \((\d+) bytes\) in ([0-9.]+) s)");
    const std::regex stamp(R"(^\[(\d\d):(\d\d):(\d\d)\.(\d\d\d)\])");
    auto time_of = [&](const std::string& text) -> std::optional<double> {
      std::smatch m;
      if (!std::regex_search(text, m, stamp)) return std::nullopt;
      return std::stoi(m[1]) * 3600.0 + std::stoi(m[2]) * 60.0 + std::stoi(m[3]) + std::stoi(m[4]) / 1e3;
    };
    ImportLog l;
    std::optional<double> began, deployed;
    std::string text;
    while (std::getline(in, text)) {
      if (!began && text.find("adopting version") != std::string::npos) began = time_of(text);
      if (began && !deployed && text.find("'mlp' deployed (") != std::string::npos) deployed = time_of(text);
      std::smatch m;
      if (!std::regex_search(text, m, imported)) continue;
      ++l.imports;
      l.fetched_chunks += std::stoull(m[1]);
      l.chunks += std::stoull(m[2]);
      l.bytes += std::stoull(m[3]);
      l.seconds += std::stod(m[4]);
    }
    if (l.imports == 0) return std::nullopt;
    // A run across midnight wraps the clock once.
    if (began && deployed) l.adoption_s = *deployed >= *began ? *deployed - *began : *deployed + 86400 - *began;
    return l;
  }

  const Options& o_;
  double scale_;
  std::string expected_;
};

}  // namespace

Result<ClusterResult> RunClusterPart(const Options& o, double scale) { return ClusterBench(o, scale).Run(); }

std::string ClusterMarkdown(const ClusterResult& c, const Options& o, double scale) {
  if (!c.ran) {
    return c.skipped.empty() ? "Part 2 (the cluster) was not run.\n\n"
                             : fmt::format("**Cluster level** skipped: {}.\n\n", c.skipped);
  }
  // Medians over a node's cold starts: wall ms, a stage's modelled ms, the bytes shared.
  auto wall = [](const std::vector<ColdStart>& v) {
    std::vector<double> x;
    for (const ColdStart& s : v) x.push_back(s.wall_ms);
    return Median(x);
  };
  auto stage = [](const std::vector<ColdStart>& v, const std::string& name) {
    std::vector<double> x;
    for (const ColdStart& s : v) {
      if (auto it = s.stages.find(name); it != s.stages.end()) x.push_back(it->second);
    }
    return Median(x);
  };
  auto shared_mib = [](const std::vector<ColdStart>& v) {
    std::vector<double> x;
    for (const ColdStart& s : v) {
      if (!s.shared_bytes.empty()) x.push_back(std::strtod(s.shared_bytes.c_str(), nullptr) / (1 << 20));
    }
    return Median(x);
  };
  const double b_wall = wall(c.b), a_wall = wall(c.a);
  const double b_fb = stage(c.b, "first-byte"), a_fb = stage(c.a, "first-byte");
  const double b_shared = shared_mib(c.b), a_shared = shared_mib(c.a);
  std::string md = fmt::format(
      "**Cluster level.** An etcd, an s3rver and two phosd (A, B: `--etcd`, `--s3-endpoint`, `--node-name`, "
      "`--keep-alive-ms {}`) on loopback, sharing the host's two cores. mlp of {} MiB (width {} x {} layers; "
      "snapshot buffers {:.1f} MiB) deployed on A (`--instances 1 --max-instances {}`, a sample request; {:.1f} s), "
      "its record in the registry {:.2f} s after the deploy returned (A uploads first). *B's first invocation*: the "
      "wall time of B's first request for mlp, which adopts it (imports each instance range's snapshot from the "
      "bucket, runs mlp to its entry point for its CPU state, restores its warm instance) before serving it; "
      "served as `{}`. *Forced cold starts*: `X-Phos-Restore-Mode: phos`, each from the settled state (only "
      "the warm instance, the pool with a scrubbed context ready), the snapshot now in the node's own store and "
      "DRAM tier; first byte and resident = `X-Phos-Stage-First-Byte-Us` and `X-Phos-Stage-Resident-Us` / time "
      "scale {} (modelled ms from the request's arrival; resident: every buffer on the device), wall = the "
      "client's whole exchange; shared = `X-Phos-Shared-Bytes`, the read-only buffers the restore mapped from an "
      "allocation the warm instance already holds instead of copying them. Every answer equals A's warm answer, "
      "itself checked against the CPU reference.\n\n"
      "| what | n | wall | first byte (modelled ms) | resident (modelled ms) | shared (MiB) |\n"
      "|---|---|---|---|---|---|\n"
      "| B's first invocation (adoption, then served) | 1 | {:.2f} s | {} | — | — |\n"
      "| B's later cold starts, median | {} | {:.1f} ms | {:.2f} | {:.2f} | {:.0f} |\n"
      "| A's cold starts, median | {} | {:.1f} ms | {:.2f} | {:.2f} | {:.0f} |\n\n",
      kKeepAliveMs, o.function_mib, c.shape.width, c.shape.layers, static_cast<double>(c.snapshot_bytes) / (1 << 20),
      kMaxInstances, c.deploy_s, c.recorded_s, c.adoption.served, scale, c.adoption.wall_ms / 1e3,
      c.adoption.first_byte_ms
          ? fmt::format("{:.2f} (from the request's admission, after the adoption)", *c.adoption.first_byte_ms)
          : std::string("—"),
      c.b.size(), b_wall, b_fb, stage(c.b, "resident"), b_shared, c.a.size(), a_wall, a_fb, stage(c.a, "resident"),
      a_shared);
  md += fmt::format(
      "Ratios: B's first invocation / B's later cold starts (wall) = {:.0f}x; B's later / A's cold starts = {:.3f} "
      "(wall), {:.3f} (first byte).",
      c.adoption.wall_ms / b_wall, b_wall / a_wall, b_fb / a_fb);
  if (b_shared > a_shared) {
    md += fmt::format(
        " B's restores map {:.0f} MiB of mlp's read-only weights from shared allocations, A's {:.0f} MiB (A copies "
        "them): A's log records which buffers are read-only only after its sample request, its snapshots already "
        "committed, while B imported manifests that carry it. That, not the tier the bytes came from, is what "
        "separates B's cold starts from A's.",
        b_shared, a_shared);
  }
  md += "\n\n";
  if (c.imported) {
    const ImportLog& l = *c.imported;
    const double wall_s = c.adoption.wall_ms / 1e3;
    md += "Where B's first invocation went (wall, from B's log):";
    if (l.adoption_s) {
      md += fmt::format(
          " the adoption — imports, mlp run to its entry point in each instance range for its CPU state, the warm "
          "instance restored — took {:.2f} s ({:.1f}%);",
          *l.adoption_s, *l.adoption_s / wall_s * 100);
    }
    md += fmt::format(
        " its {} import{} from the remote tier fetched {} of {} chunks (the ranges share the weights' chunks), "
        "{:.1f} MB in {:.2f} s ({:.1f} MB/s), while mlp ran to its entry point in the first range on the same two "
        "cores",
        l.imports, l.imports == 1 ? "" : "s", l.fetched_chunks, l.chunks, static_cast<double>(l.bytes) / 1e6,
        l.seconds, static_cast<double>(l.bytes) / l.seconds / 1e6);
    if (l.adoption_s) {
      const double after = wall_s - *l.adoption_s;
      md += fmt::format(". Then {:.1f} s ({:.1f}%) to the answer", after, after / wall_s * 100);
      // The request's own stages count from its admission, which follows the adoption's answer: what
      // the stages do not cover is the wait for that answer.
      const auto& st = c.adoption.stages;
      auto at = [&](const char* name) {
        auto it = st.find(name);
        return it == st.end() ? 0.0 : it->second;
      };
      const double served_s = at("first-byte") * scale / 1e3;
      const double before = after - served_s;
      if (before > 1.0) {
        md += fmt::format(
            ": {:.1f} s before the request was admitted, the adoption's answer waiting until B's context pool "
            "held the contexts the function's restores may lease (as a deploy's does)",
            before);
      }
      if (served_s > 1.0) {
        md += fmt::format(
            "{} {:.1f} s from the request's admission to its first byte, served as `{}`, of which the restore "
            "waited {:.1f} s for a context from B's pool (`pool-wait`)",
            before > 1.0 ? ";" : ":", served_s, c.adoption.served, at("pool-wait") * scale / 1e3);
      }
      const double waits_s = std::max(before, 0.0) + at("pool-wait") * scale / 1e3;
      if (waits_s > 1.0) {
        md += fmt::format(
            ". Those waits are for context creations, which are device time: {:.1f} s of wall, {:.1f} s modelled "
            "at time scale {}",
            waits_s, waits_s / scale, scale);
      }
    }
    md += ".\n\n";
  }
  return md;
}

}  // namespace phos::bench
