// Restore benchmark (issue 6, docs/design.md, "The bound"): the first-response latency of mlp restored in
// every restore mode, in one run of one phosd on one simgpu device profile, against the bound
// max(B/W, E) + 5 ms.
//
//   B = the snapshot's buffer bytes the first response needs (mlp reads all its weights: the sum of
//       the manifest's buffer sizes, read from the store beside the running daemon),
//   W = the profile's pinned host-to-device bandwidth (simgpu's phosSimGetProfile),
//   E = the request's compute time, measured as the warm first-byte latency in the same run.
//
// Latencies are the X-Phos-Stage-First-Byte-Us header (wall time from the request's arrival in
// phosd) divided by the time scale: modelled milliseconds. Each forced-mode request brings up a new
// instance; before each, the benchmark waits until the previous extra instance has ended and the
// context pool has a scrubbed context ready, so neither an eviction nor a scrub is in the latency.
// Every response must be byte-identical to the warm one, which is checked against the CPU reference.
//
//   restore_bench [--sizes 256,2048] [--layers 4] [--warm-reps 5] [--reps 3] [--fresh-reps 1]
//                 [--keep-alive-ms 1500] [--report PATH | --no-report] [--keep-data]
// Profile: PHOS_SIMGPU_PROFILE (default a100-pcie4); time scale: PHOS_SIMGPU_TIME_SCALE (default
// the profile's, 20 for a100-pcie4 (phosd_harness.h BenchTimeScale), not simgpu's 10: a phos
// restore runs the loader's copies and the function's kernels at once, and on a 2-core host at
// scale 10 the copy engine then falls below the modelled 25 GB/s — the benchmark would measure
// this host, not the device; docs/benchmarks.md). Fresh-context modes
// (cold-boot, stop-the-world, no-pool) pay the profile's 3.1 s context creation: ~62 s of wall
// each at scale 20, hence --fresh-reps.
#include <cuda.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mlp_model.h"
#include "phos/base/status.h"
#include "phos/simgpu/simgpu.h"
#include "phosd_harness.h"
#include "report.h"

namespace {

using phos::Result;
using phos::Status;
using phos::bench::Daemon;
using phos::bench::Http;
using phos::bench::HttpResponse;
using phos::bench::kBoundFloorMs;
using phos::bench::Median;
using phos::bench::OpenSimDevice;
using phos::bench::SimDevice;
using phos::bench::Run;

constexpr double kTarget = 1.15;  // issue 6: phos <= 1.15x the bound
const char* const kModes[] = {"warm", "phos", "no-order", "no-pool", "stop-the-world", "cold-boot"};

struct Options {
  std::vector<int> sizes_mib{256, 2048};
  int layers = 4;
  int warm_reps = 5;
  int reps = 3;        // phos, no-order: a pooled context each
  int fresh_reps = 1;  // no-pool, stop-the-world, cold-boot: a context created from scratch each
  int keep_alive_ms = 1500;
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
  bool keep_data = false;
};

// One measured invocation, in modelled milliseconds.
struct Sample {
  std::map<std::string, double> stage_ms;  // "lease", "cpu-resume", "first-launch", "first-byte", "resident"
  int64_t misses = -1;
  int64_t modules_loaded = -1;  // X-Phos-Modules-Loaded: loads on the way to the first launch
};

struct ModeResult {
  std::string mode;
  std::vector<Sample> samples;

  std::vector<double> Stage(const std::string& stage) const {
    std::vector<double> v;
    for (const Sample& s : samples) {
      if (auto it = s.stage_ms.find(stage); it != s.stage_ms.end()) v.push_back(it->second);
    }
    return v;
  }
  double Latency() const { return Median(Stage("first-byte")); }
};

struct SizeResult {
  int size_mib = 0;
  phos::mlp::Shape shape;
  uint64_t buffer_bytes = 0;  // B
  int buffers = 0;
  int ranked = 0;          // buffers with a recorded first-touch rank
  double transfer_ms = 0;  // B / W
  double compute_ms = 0;   // E
  double bound_ms = 0;
  std::vector<ModeResult> modes;

  const ModeResult* Find(const std::string& mode) const {
    for (const ModeResult& m : modes) {
      if (m.mode == mode) return &m;
    }
    return nullptr;
  }
};

class Bench {
 public:
  Bench(const Options& o, Daemon* d, double scale, double h2d_bps)
      : o_(o), d_(d), scale_(scale), h2d_bps_(h2d_bps) {}

  Result<SizeResult> Measure(int size_mib) {
    SizeResult r;
    r.size_mib = size_mib;
    r.shape = phos::mlp::ShapeForSize(static_cast<size_t>(size_mib), o_.layers, 1);
    const std::string name = fmt::format("mlp-{}", size_mib);
    const std::string request = R"({"seed": 7})";
    std::printf("\n== mlp %d MiB (width %d x %d layers): deploy\n", size_mib, r.shape.width, r.shape.layers);
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(Run({PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "deploy", name, PHOS_MLP_FUNCTION,
                              "--instances", "1", "--max-instances", "2", "--sample", R"({"seed": 1})", "--",
                              "--size-mib", std::to_string(size_mib), "--layers", std::to_string(o_.layers)})
                             .status());
    PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::seconds(600)));
    PHOS_RETURN_IF_ERROR(ReadManifest(name, &r));
    r.transfer_ms = static_cast<double>(r.buffer_bytes) / h2d_bps_ * 1e3;

    expected_body_.clear();  // each size has its own answer
    PHOS_ASSIGN_OR_RETURN(HttpResponse reference, Invoke(name, "warm", request, nullptr));
    PHOS_RETURN_IF_ERROR(phos::bench::CheckMlpReference(reference.body, r.shape, 7));
    expected_body_ = reference.body;
    for (const char* mode : kModes) {
      ModeResult m{mode, {}};
      bool fresh = m.mode == "no-pool" || m.mode == "stop-the-world" || m.mode == "cold-boot";
      int reps = m.mode == "warm" ? o_.warm_reps : fresh ? o_.fresh_reps : o_.reps;
      for (int i = 0; i < reps; ++i) {
        // Settled: no extra instance left to evict, a scrubbed pooled context ready.
        PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::seconds(600)));
        Sample s;
        PHOS_RETURN_IF_ERROR(Invoke(name, m.mode, request, &s).status());
        PrintSample(m.mode, i + 1, reps, s);
        m.samples.push_back(std::move(s));
      }
      r.modes.push_back(std::move(m));
    }
    r.compute_ms = r.Find("warm")->Latency();
    r.bound_ms = phos::bench::BoundMs(r.transfer_ms, r.compute_ms);
    PHOS_RETURN_IF_ERROR(Run({PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "rm", name}).status());
    return r;
  }

 private:
  // B: every buffer of the latest snapshot (mlp's first response reads all its weights).
  Status ReadManifest(const std::string& name, SizeResult* r) {
    PHOS_ASSIGN_OR_RETURN(phos::bench::SnapshotSize size,
                          phos::bench::ReadSnapshotSize(d_->data_dir(), name));
    r->buffer_bytes = size.buffer_bytes;
    r->buffers = size.buffers;
    r->ranked = size.ranked;
    std::printf("snapshot '%s' v%llu: %d buffers, %llu bytes, %d with a first-touch rank\n", name.c_str(),
                static_cast<unsigned long long>(size.version), r->buffers,
                static_cast<unsigned long long>(r->buffer_bytes), r->ranked);
    return Status::Ok();
  }

  // Invokes `mode`; the served mode must be the one asked for and the body the warm one.
  Result<HttpResponse> Invoke(const std::string& name, const std::string& mode, const std::string& request,
                              Sample* sample) {
    PHOS_ASSIGN_OR_RETURN(HttpResponse r,
                          Http(d_->endpoint() + "/v1/functions/" + name + "/invoke", request,
                               {"X-Phos-Restore-Mode: " + mode, "X-Phos-Timeout-Ms: 600000"}));
    if (r.status != 200)
      return Status::Internal(fmt::format("{} invoke: HTTP {}: {}", mode, r.status, r.body));
    if (r.headers["x-phos-restore-mode"] != mode) {
      return Status::Internal(
          fmt::format("asked for {}, served as '{}'", mode, r.headers["x-phos-restore-mode"]));
    }
    if (!expected_body_.empty() && r.body != expected_body_) {
      return Status::Internal(
          fmt::format("{} answered {} where warm answered {}", mode, r.body, expected_body_));
    }
    if (sample == nullptr) return r;
    for (const char* stage : {"lease", "cpu-resume", "first-launch", "first-byte", "resident"}) {
      if (std::optional<double> ms = phos::bench::StageMs(r, stage, scale_)) sample->stage_ms[stage] = *ms;
    }
    if (!sample->stage_ms.count("first-byte"))
      return Status::Internal(mode + " answer has no first-byte stage");
    if (auto it = r.headers.find("x-phos-speculation-misses"); it != r.headers.end()) {
      sample->misses = std::strtoll(it->second.c_str(), nullptr, 10);
    }
    if (auto it = r.headers.find("x-phos-modules-loaded"); it != r.headers.end()) {
      sample->modules_loaded = std::strtoll(it->second.c_str(), nullptr, 10);
    }
    return r;
  }

  static void PrintSample(const std::string& mode, int i, int n, const Sample& s) {
    std::string line = fmt::format("{:>15} {}/{}:", mode, i, n);
    for (const auto& [stage, ms] : s.stage_ms) line += fmt::format(" {} {:.2f}", stage, ms);
    if (s.misses >= 0) line += fmt::format(" misses {}", s.misses);
    if (s.modules_loaded >= 0) line += fmt::format(" modules-loaded {}", s.modules_loaded);
    std::printf("%s (modelled ms)\n", line.c_str());
    std::fflush(stdout);
  }

  const Options& o_;
  Daemon* d_;
  double scale_;
  double h2d_bps_;
  std::string expected_body_;
};

std::string Ms(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.1f}", v);
}

std::string Markdown(const std::vector<SizeResult>& results, const std::string& profile, double scale,
                     double h2d_bps, bool met, const std::string& command) {
  std::string md = fmt::format(
      "## Restore: mlp first-response latency in every restore mode against the bound\n\n"
      "Command: `{}` (profile {}, time scale {}; {})\n\n"
      "One phosd, one run. mlp deployed with `--instances 1 --max-instances 2 --sample '{{\"seed\": 1}}'`; "
      "each "
      "request `{{\"seed\": 7}}`. Latency = `X-Phos-Stage-First-Byte-Us` / time scale (modelled ms from the "
      "request's "
      "arrival in phosd); stages likewise, median over the repetitions. Bound = max(B/W, E) + {} ms "
      "(docs/design.md, \"The bound\"): "
      "B = "
      "the snapshot's buffer bytes (mlp reads all its weights), W = the profile's pinned H2D bandwidth "
      "({:.1f} GB/s, "
      "`phosSimGetProfile`), E = the warm latency measured here. Before each forced-mode request the "
      "previous extra "
      "instance had ended and a scrubbed pooled context was ready. Every answer was byte-identical to the "
      "warm one, "
      "checked against the CPU reference.\n",
      command, profile, scale, phos::bench::NowUtc(), kBoundFloorMs, h2d_bps / 1e9);
  for (const SizeResult& r : results) {
    md += fmt::format(
        "\n### mlp {} MiB (width {} x {} layers)\n\n"
        "B = {} bytes in {} buffers ({} with a first-touch rank); B/W = {:.1f} ms; E = {:.1f} ms; bound = "
        "{:.1f} ms\n\n"
        "| mode | reps | first byte (ms) | / bound | lease | cpu-resume | first-launch | resident "
        "| load GB/s | misses |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n",
        r.size_mib, r.shape.width, r.shape.layers, r.buffer_bytes, r.buffers, r.ranked, r.transfer_ms,
        r.compute_ms, r.bound_ms);
    for (const ModeResult& m : r.modes) {
      int64_t misses = -1;
      for (const Sample& s : m.samples) misses = std::max(misses, s.misses);
      // The loader's effective rate: B over the time from the lease to the last buffer resident.
      double load_ms = Median(m.Stage("resident")) - Median(m.Stage("lease"));
      std::string rate = std::isnan(load_ms) ? "—" : fmt::format("{:.1f}", r.buffer_bytes / load_ms / 1e6);
      md += fmt::format("| {} | {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} |\n", m.mode, m.samples.size(),
                        Ms(m.Latency()), m.Latency() / r.bound_ms, Ms(Median(m.Stage("lease"))),
                        Ms(Median(m.Stage("cpu-resume"))), Ms(Median(m.Stage("first-launch"))),
                        Ms(Median(m.Stage("resident"))), rate, misses >= 0 ? std::to_string(misses) : "—");
    }
    double phos = r.Find("phos")->Latency();
    md += fmt::format(
        "\nphos / bound = **{:.2f}** (target ≤ {}); phos / stop-the-world = **{:.3f}**; "
        "phos / cold-boot = **{:.3f}**\n",
        phos / r.bound_ms, kTarget, phos / r.Find("stop-the-world")->Latency(),
        phos / r.Find("cold-boot")->Latency());
  }
  md +=
      fmt::format("\nTarget phos ≤ {}x the bound at every size: **{}**.\n", kTarget, met ? "met" : "missed");
  return md;
}

Result<Options> ParseOptions(int argc, char** argv) {
  Options o;
  auto number = [&](int& i, int* out) -> Status {
    if (i + 1 >= argc) return Status::InvalidArgument(std::string(argv[i]) + " needs a value");
    char* end = nullptr;
    long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 1)
      return Status::InvalidArgument(fmt::format("{} must be a positive integer", argv[i - 1]));
    *out = static_cast<int>(v);
    return Status::Ok();
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      PHOS_ASSIGN_OR_RETURN(o.sizes_mib, phos::bench::ParsePositiveList(a, argv[++i]));
    } else if (a == "--layers") {
      PHOS_RETURN_IF_ERROR(number(i, &o.layers));
    } else if (a == "--warm-reps") {
      PHOS_RETURN_IF_ERROR(number(i, &o.warm_reps));
    } else if (a == "--reps") {
      PHOS_RETURN_IF_ERROR(number(i, &o.reps));
    } else if (a == "--fresh-reps") {
      PHOS_RETURN_IF_ERROR(number(i, &o.fresh_reps));
    } else if (a == "--keep-alive-ms") {
      PHOS_RETURN_IF_ERROR(number(i, &o.keep_alive_ms));
    } else if (a == "--report" && i + 1 < argc) {
      o.report = argv[++i];
    } else if (a == "--no-report") {
      o.report.clear();
    } else if (a == "--keep-data") {
      o.keep_data = true;
    } else {
      return Status::InvalidArgument(
          "usage: restore_bench [--sizes 256,2048] [--layers 4] [--warm-reps 5] [--reps 3] [--fresh-reps 1] "
          "[--keep-alive-ms 1500] [--report PATH | --no-report] [--keep-data]");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Result<Options> parsed = ParseOptions(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "restore_bench: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const Options& o = *parsed;
  // phosd inherits the environment: both read the same profile and time scale.
  Result<SimDevice> device = OpenSimDevice();
  if (!device.ok()) {
    std::fprintf(stderr, "restore_bench: %s\n", device.status().message().c_str());
    return 1;
  }
  const PhosSimConfig& config = device->config;
  const PhosSimProfileInfo& profile = device->profile;
  std::printf("restore bench: profile %s, time scale %g, H2D pinned %.1f GB/s\n", config.profile,
              config.time_scale, profile.h2d_pinned_bps / 1e9);

  Daemon daemon;
  Status started =
      daemon.Start("restore-bench", {"--pool-min", "2", "--keep-alive-ms", std::to_string(o.keep_alive_ms)});
  if (started.ok()) {
    std::printf("phosd at %s, data %s, log %s; waiting for the context pool\n", daemon.endpoint().c_str(),
                daemon.data_dir().c_str(), daemon.log_path().c_str());
    std::fflush(stdout);
    started = daemon.WaitPoolReady(2, std::chrono::minutes(5));
  }
  std::vector<SizeResult> results;
  Status status = started;
  Bench bench(o, &daemon, config.time_scale, profile.h2d_pinned_bps);
  for (int size : o.sizes_mib) {
    if (!status.ok()) break;
    Result<SizeResult> r = bench.Measure(size);
    if (r.ok()) {
      results.push_back(std::move(*r));
    } else {
      status = r.status().WithContext(fmt::format("mlp {} MiB", size));
    }
  }
  daemon.Stop();
  if (!status.ok()) {
    std::fprintf(stderr, "restore_bench: %s (phosd log: %s)\n", status.ToString().c_str(),
                 daemon.log_path().c_str());
    return 1;
  }

  bool met = true;
  for (const SizeResult& r : results) met = met && r.Find("phos")->Latency() / r.bound_ms <= kTarget;
  // The report's table is the summary on the terminal too.
  std::string md = Markdown(results, config.profile, config.time_scale, profile.h2d_pinned_bps, met,
                            phos::bench::CommandLine(argc, argv));
  std::printf("\n%s", md.c_str());
  if (!o.report.empty()) phos::bench::WriteSection(o.report, "restore", md);
  if (!o.keep_data) {
    std::error_code ec;
    std::filesystem::remove_all(daemon.data_dir(), ec);
  } else {
    std::printf("kept %s\n", daemon.data_dir().c_str());
  }
  return met ? 0 : 1;
}
