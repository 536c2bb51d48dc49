// Cold-start benchmark in real conditions (issue 18): mlp's first-response latency where users meet
// cold starts, not in the idealized state restore_bench waits for before each request:
//
//   (a) the first invocation right after a deploy returns,
//   (b) forced restores back to back, the next as soon as the previous answered,
//   (c) bursts of N simultaneous forced restores, N up to the function's instance ranges,
//   (d) a request once the function has scaled to zero (keep-alive expired).
//
// Each against the bound (docs/design.md, "The bound"): max(B/W, E) + 5 ms for one cold start,
// N·B/W + E + 5 ms for a burst of N; B, W and E as in restore_bench. Every answer must be
// byte-identical to the warm answer, itself checked against the CPU reference; a forced restore
// must be served in the mode asked for. One phosd with its default pool settings.
//
//   coldstart_bench [--sizes 256,1024] [--requests 30] [--scenarios a,b,c,d] [--bursts 2,4]
//                   [--max-instances 4] [--keep-alive-ms 1500] [--report PATH | --no-report]
// Profile: PHOS_SIMGPU_PROFILE (default a100-pcie4); time scale: PHOS_SIMGPU_TIME_SCALE (default
// the profile's, 20 for a100-pcie4, for restore_bench's reason: at scale 10 a 2-core host, not the
// device, limits the copies; phosd_harness.h BenchTimeScale).
#include <cuda.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coldstart_table.h"
#include "phos/base/status.h"
#include "phos/simgpu/simgpu.h"
#include "phosd_harness.h"
#include "report.h"

namespace phos::bench {
namespace {

constexpr int kLayers = 4;  // restore_bench's default
constexpr int kWarmReps = 5;
constexpr uint64_t kRequestSeed = 7;
const char* const kRequest = R"({"seed": 7})";
const char* const kSample = R"({"seed": 1})";
constexpr std::chrono::seconds kSettleLimit{600};

struct Options {
  std::vector<int> sizes_mib{256, 1024};
  int requests = 30;
  std::string scenarios = "abcd";
  std::vector<int> bursts{2, 4};
  int max_instances = 4;
  int keep_alive_ms = 1500;
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
};

// The counters a scenario reports as deltas, read from one /metrics scrape.
struct Counters {
  std::optional<double> lease_misses;
  std::optional<double> retire_sum_s;
  std::optional<double> retire_count;
};

std::optional<double> Optional(const Result<double>& r) {
  return r.ok() ? std::optional<double>(*r) : std::nullopt;
}

class ColdStartBench {
 public:
  ColdStartBench(const Options& o, Daemon* d, double scale, double h2d_bps)
      : o_(o), d_(d), scale_(scale), h2d_bps_(h2d_bps) {}

  Result<SizeResult> Measure(int size_mib) {
    SizeResult r;
    r.size_mib = size_mib;
    r.shape = mlp::ShapeForSize(static_cast<size_t>(size_mib), kLayers, 1);
    std::printf("\n== mlp %d MiB (width %d x %d layers)\n", size_mib, r.shape.width, r.shape.layers);
    std::fflush(stdout);
    expected_body_.clear();  // each size has its own answer
    // (a) also measures B and E, which every scenario's bound needs; without it a function is
    // deployed for the purpose.
    if (Wants('a')) {
      PHOS_RETURN_IF_ERROR(AfterDeploy(&r));
    } else {
      const std::string name = fmt::format("mlp-{}-e", size_mib);
      PHOS_RETURN_IF_ERROR(Deploy(name, size_mib, 1, 2));
      PHOS_RETURN_IF_ERROR(MeasureWarm(name, &r));
      PHOS_RETURN_IF_ERROR(Remove(name));
    }
    if (Wants('b')) PHOS_RETURN_IF_ERROR(BackToBack(&r));
    if (Wants('c')) PHOS_RETURN_IF_ERROR(Bursts(&r));
    if (Wants('d')) PHOS_RETURN_IF_ERROR(AfterScaleToZero(&r));
    return r;
  }

 private:
  bool Wants(char scenario) const { return o_.scenarios.find(scenario) != std::string::npos; }

  // (a): a deploy, and the moment it returns one forced restore; then the function is removed.
  Status AfterDeploy(SizeResult* r) {
    ScenarioResult s{.scenario = 'a'};
    PHOS_ASSIGN_OR_RETURN(Counters before, ReadCounters());
    for (int i = 0; i < o_.requests; ++i) {
      const std::string name = fmt::format("mlp-{}-a{}", r->size_mib, i);
      PHOS_RETURN_IF_ERROR(Deploy(name, r->size_mib, 1, 2));
      PHOS_ASSIGN_OR_RETURN(Answer first, Invoke(name, "phos"));
      if (i == 0) {
        // The warm answer this first restore (and every later request) must equal is measured now.
        PHOS_RETURN_IF_ERROR(MeasureWarm(name, r));
        if (first.body != expected_body_) {
          return Status::Internal(
              fmt::format("phos answered {} where warm answered {}", first.body, expected_body_));
        }
      }
      Print(s, i + 1, o_.requests, first.cold_start);
      s.requests.push_back(std::move(first.cold_start));
      PHOS_RETURN_IF_ERROR(Remove(name));
    }
    PHOS_RETURN_IF_ERROR(CloseScenario(before, &s));
    r->scenarios.push_back(std::move(s));
    return Status::Ok();
  }

  // B from the function's snapshot; E = the median of 5 warm requests, once only the warm instance
  // is left; the first warm answer, checked against the CPU reference, is the one every request
  // must give.
  Status MeasureWarm(const std::string& name, SizeResult* r) {
    PHOS_ASSIGN_OR_RETURN(r->snapshot, ReadSnapshotSize(d_->data_dir(), name));
    r->transfer_ms = static_cast<double>(r->snapshot.buffer_bytes) / h2d_bps_ * 1e3;
    std::printf("snapshot '%s' v%llu: %d buffers, %llu bytes, %d with a first-touch rank; B/W %.1f ms\n",
                name.c_str(), static_cast<unsigned long long>(r->snapshot.version), r->snapshot.buffers,
                static_cast<unsigned long long>(r->snapshot.buffer_bytes), r->snapshot.ranked,
                r->transfer_ms);
    PHOS_RETURN_IF_ERROR(WaitOnlyWarm(name));
    std::vector<double> warm;
    for (int i = 0; i < kWarmReps; ++i) {
      PHOS_ASSIGN_OR_RETURN(Answer a, Invoke(name, "warm"));
      if (expected_body_.empty()) {
        PHOS_RETURN_IF_ERROR(CheckMlpReference(a.body, r->shape, kRequestSeed));
        expected_body_ = a.body;
      } else if (a.body != expected_body_) {
        return Status::Internal(fmt::format("warm answered {} and then {}", expected_body_, a.body));
      }
      warm.push_back(a.cold_start.stage_ms.at("first-byte"));
    }
    r->compute_ms = Median(warm);
    std::printf("E (warm first byte, median of %d) %.2f ms; bound max(B/W, E) + %.0f ms = %.1f ms\n",
                kWarmReps, r->compute_ms, kBoundFloorMs,
                phos::bench::BoundMs(r->transfer_ms, r->compute_ms));
    std::fflush(stdout);
    return Status::Ok();
  }

  // (b): forced restores one after another, with no pause between them.
  Status BackToBack(SizeResult* r) {
    ScenarioResult s{.scenario = 'b'};
    const std::string name = fmt::format("mlp-{}-b", r->size_mib);
    PHOS_RETURN_IF_ERROR(Deploy(name, r->size_mib, 1, 2));
    PHOS_RETURN_IF_ERROR(WaitOnlyWarm(name));
    PHOS_ASSIGN_OR_RETURN(Counters before, ReadCounters());
    for (int i = 0; i < o_.requests; ++i) {
      PHOS_ASSIGN_OR_RETURN(Answer a, Invoke(name, "phos"));
      Print(s, i + 1, o_.requests, a.cold_start);
      s.requests.push_back(std::move(a.cold_start));
    }
    PHOS_RETURN_IF_ERROR(CloseScenario(before, &s));
    r->scenarios.push_back(std::move(s));
    return Remove(name);
  }

  // (c): for each N, bursts of N simultaneous forced restores, each from the settled state (only
  // the warm instance left), until N has its requests.
  Status Bursts(SizeResult* r) {
    const std::string name = fmt::format("mlp-{}-c", r->size_mib);
    PHOS_RETURN_IF_ERROR(Deploy(name, r->size_mib, 1, o_.max_instances));
    for (int n : o_.bursts) {
      ScenarioResult s{.scenario = 'c', .burst = n};
      PHOS_ASSIGN_OR_RETURN(Counters before, ReadCounters());
      int bursts = (o_.requests + n - 1) / n;
      for (int b = 0; b < bursts; ++b) {
        PHOS_RETURN_IF_ERROR(WaitOnlyWarm(name));
        std::vector<std::optional<Result<Answer>>> answers(static_cast<size_t>(n));
        std::vector<std::thread> threads;
        for (int k = 0; k < n; ++k) {
          threads.emplace_back(
              [this, &name, &answers, k] { answers[static_cast<size_t>(k)].emplace(Invoke(name, "phos")); });
        }
        for (std::thread& t : threads) t.join();
        for (int k = 0; k < n; ++k) {
          Result<Answer>& a = *answers[static_cast<size_t>(k)];
          if (!a.ok()) return a.status().WithContext(fmt::format("burst of {}, request {}", n, k + 1));
          Print(s, b * n + k + 1, bursts * n, a->cold_start);
          s.requests.push_back(std::move(a->cold_start));
        }
      }
      PHOS_RETURN_IF_ERROR(CloseScenario(before, &s));
      r->scenarios.push_back(std::move(s));
    }
    return Remove(name);
  }

  // (d): a request in the default mode each time the function has no instance left.
  Status AfterScaleToZero(SizeResult* r) {
    ScenarioResult s{.scenario = 'd'};
    const std::string name = fmt::format("mlp-{}-d", r->size_mib);
    if (Status deployed = Deploy(name, r->size_mib, 0, 2); !deployed.ok()) {
      // A phosd (or phos-fn) that cannot scale a function to zero: the scenario does not exist there.
      std::string why = deployed.message();
      why = why.substr(0, why.find('\n'));
      std::printf("(d) not available: %s\n", why.c_str());
      s.unavailable = why;
      r->scenarios.push_back(std::move(s));
      return Status::Ok();
    }
    PHOS_ASSIGN_OR_RETURN(Counters before, ReadCounters());
    for (int i = 0; i < o_.requests; ++i) {
      PHOS_RETURN_IF_ERROR(d_->WaitInstances(
          name, [](const InstanceCounts& n) { return n.total() == 0 && n.ending == 0 && n.queued == 0; },
          kSettleLimit, "no instance"));
      PHOS_ASSIGN_OR_RETURN(Answer a, Invoke(name, ""));
      Print(s, i + 1, o_.requests, a.cold_start);
      s.requests.push_back(std::move(a.cold_start));
    }
    PHOS_RETURN_IF_ERROR(CloseScenario(before, &s));
    r->scenarios.push_back(std::move(s));
    return Remove(name);
  }

  // Every deploy's sample must be served and teach the first-touch order (issue 18): a deploy
  // whose sample failed or timed out fails the scenario.
  Status Deploy(const std::string& name, int size_mib, int instances, int max_instances) {
    Result<std::string> out =
        Run({PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "deploy", name, PHOS_MLP_FUNCTION, "--instances",
             std::to_string(instances), "--max-instances", std::to_string(max_instances), "--sample", kSample, "--",
             "--size-mib", std::to_string(size_mib), "--layers", std::to_string(kLayers)});
    const std::string what = fmt::format("deploy {} --instances {}", name, instances);
    if (!out.ok()) return out.status().WithContext(what);
    if (out->find("sample request served; first-touch order learned") == std::string::npos) {
      return Status::Internal(what + ": the sample request was not served: " + *out);
    }
    return Status::Ok();
  }

  Status Remove(const std::string& name) {
    return Run({PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "rm", name}).status().WithContext("rm " + name);
  }

  // Only the warm instance left: the extras ended by keep-alive and their ranges scrubbed.
  Status WaitOnlyWarm(const std::string& name) {
    return d_->WaitInstances(
        name,
        [](const InstanceCounts& n) {
          return n.idle == 1 && n.busy == 0 && n.starting == 0 && n.ending == 0 && n.queued == 0;
        },
        kSettleLimit, "only the warm instance");
  }

  struct Answer {
    std::string body;
    ColdStart cold_start;
  };

  // One invocation in `mode` (empty: phosd's default); a forced mode must be served as asked, and
  // once the warm answer is known every answer must equal it. Called from several threads at once.
  Result<Answer> Invoke(const std::string& name, const std::string& mode) const {
    std::vector<std::string> headers = {"X-Phos-Timeout-Ms: 600000"};
    if (!mode.empty()) headers.push_back("X-Phos-Restore-Mode: " + mode);
    PHOS_ASSIGN_OR_RETURN(HttpResponse r,
                          Http(d_->endpoint() + "/v1/functions/" + name + "/invoke", kRequest, headers));
    std::string label = mode.empty() ? "default-mode" : mode;
    if (r.status != 200)
      return Status::Internal(fmt::format("{} invoke of {}: HTTP {}: {}", label, name, r.status, r.body));
    Answer a;
    a.body = std::move(r.body);
    a.cold_start.served = r.headers["x-phos-restore-mode"];
    if (a.cold_start.served.empty()) return Status::Internal(label + " answer has no X-Phos-Restore-Mode");
    if (!mode.empty() && a.cold_start.served != mode) {
      return Status::Internal(fmt::format("asked for {}, served as '{}'", mode, a.cold_start.served));
    }
    if (!expected_body_.empty() && a.body != expected_body_) {
      return Status::Internal(
          fmt::format("{} answered {} where warm answered {}", label, a.body, expected_body_));
    }
    a.cold_start.stage_ms = AllStagesMs(r, scale_);
    if (!a.cold_start.stage_ms.count("first-byte"))
      return Status::Internal(label + " answer has no first-byte stage");
    return a;
  }

  Result<Counters> ReadCounters() {
    PHOS_ASSIGN_OR_RETURN(std::string text, d_->Metrics());
    return Counters{.lease_misses = Optional(MetricValue(text, "phos_ctxpool_lease_misses_total")),
                    .retire_sum_s = Optional(MetricValue(text, "phos_instance_retire_seconds_sum")),
                    .retire_count = Optional(MetricValue(text, "phos_instance_retire_seconds_count"))};
  }

  // The scenario's deltas of the counters since `before`.
  Status CloseScenario(const Counters& before, ScenarioResult* s) {
    PHOS_ASSIGN_OR_RETURN(Counters after, ReadCounters());
    if (before.lease_misses && after.lease_misses)
      s->pool_misses = *after.lease_misses - *before.lease_misses;
    if (before.retire_count && after.retire_count && before.retire_sum_s && after.retire_sum_s) {
      s->evictions = *after.retire_count - *before.retire_count;
      if (*s->evictions > 0) {
        s->eviction_mean_ms = (*after.retire_sum_s - *before.retire_sum_s) / *s->evictions * 1e3 / scale_;
      }
    }
    return Status::Ok();
  }

  static void Print(const ScenarioResult& s, int i, int n, const ColdStart& c) {
    std::string line = fmt::format("{:>24} {}/{}: {}", ScenarioName(s), i, n, c.served);
    for (const auto& [stage, ms] : c.stage_ms) line += fmt::format(" {} {:.2f}", stage, ms);
    std::printf("%s (modelled ms)\n", line.c_str());
    std::fflush(stdout);
  }

  const Options& o_;
  Daemon* d_;
  double scale_;
  double h2d_bps_;
  std::string expected_body_;  // written only between scenarios, read by every request
};

Result<Options> ParseOptions(int argc, char** argv) {
  Options o;
  auto number = [&](int& i, int* out) { return ParsePositiveFlag(argc, argv, &i, out); };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      PHOS_ASSIGN_OR_RETURN(o.sizes_mib, ParsePositiveList(a, argv[++i]));
    } else if (a == "--bursts" && i + 1 < argc) {
      PHOS_ASSIGN_OR_RETURN(o.bursts, ParsePositiveList(a, argv[++i]));
    } else if (a == "--scenarios" && i + 1 < argc) {
      std::string list = argv[++i];
      o.scenarios.clear();
      for (size_t p = 0; p <= list.size(); p += 2) {
        char c = list[p];
        if (c < 'a' || c > 'd' || (p + 1 < list.size() && list[p + 1] != ',')) {
          return Status::InvalidArgument("--scenarios: letters a to d separated by commas, not '" + list +
                                         "'");
        }
        o.scenarios += c;
      }
    } else if (a == "--requests") {
      PHOS_RETURN_IF_ERROR(number(i, &o.requests));
    } else if (a == "--max-instances") {
      PHOS_RETURN_IF_ERROR(number(i, &o.max_instances));
    } else if (a == "--keep-alive-ms") {
      PHOS_RETURN_IF_ERROR(number(i, &o.keep_alive_ms));
    } else if (a == "--report" && i + 1 < argc) {
      o.report = argv[++i];
    } else if (a == "--no-report") {
      o.report.clear();
    } else {
      return Status::InvalidArgument(
          "usage: coldstart_bench [--sizes 256,1024] [--requests 30] [--scenarios a,b,c,d] [--bursts 2,4] "
          "[--max-instances 4] [--keep-alive-ms 1500] [--report PATH | --no-report]");
    }
  }
  if (o.max_instances < 2) return Status::InvalidArgument("--max-instances must be at least 2");
  for (int n : o.bursts) {
    if (n > o.max_instances) {
      return Status::InvalidArgument(fmt::format(
          "--bursts: a burst of {} needs more instance ranges than --max-instances {}", n, o.max_instances));
    }
  }
  return o;
}

// The benchmark's run: exit code 0 when every target was met, 1 when one was missed or a scenario
// could not be run, 2 for bad options.
int Main(int argc, char** argv) {
  Result<Options> parsed = ParseOptions(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "coldstart_bench: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const Options& o = *parsed;
  // phosd inherits the environment: both read the same profile and time scale.
  Result<SimDevice> device = OpenSimDevice();
  if (!device.ok()) {
    std::fprintf(stderr, "coldstart_bench: %s\n", device.status().message().c_str());
    return 1;
  }
  const PhosSimConfig& config = device->config;
  const PhosSimProfileInfo& profile = device->profile;
  std::printf("cold-start bench: profile %s, time scale %g, H2D pinned %.1f GB/s\n", config.profile,
              config.time_scale, profile.h2d_pinned_bps / 1e9);

  // Only phosd allocates its device memory's pages ahead (this process's simgpu is initialised):
  // enough for the most the scenarios hold at once — a burst with its warm instance and spare
  // range, or a deploy's capture, sample, warm instance and first request while the previous
  // function's ranges are scrubbed — with room to spare.
  const int largest = *std::max_element(o.sizes_mib.begin(), o.sizes_mib.end());
  setenv("PHOS_SIMGPU_PREFAULT", fmt::format("{}M", largest * (o.max_instances + 4)).c_str(), /*overwrite=*/0);
  const std::string prefault = std::getenv("PHOS_SIMGPU_PREFAULT");

  Daemon daemon;
  // The default pool settings: what a user who starts phosd meets.
  Status status = daemon.Start("coldstart-bench", {"--keep-alive-ms", std::to_string(o.keep_alive_ms)});
  if (status.ok()) {
    std::printf("phosd at %s, data %s, log %s; waiting for the context pool\n", daemon.endpoint().c_str(),
                daemon.data_dir().c_str(), daemon.log_path().c_str());
    std::fflush(stdout);
    // The pool's first contexts, as many as its default target asks for before any deploy.
    Result<int> ready = daemon.WaitPoolAtRest(std::chrono::minutes(5));
    status = ready.status();
    if (ready.ok()) std::printf("context pool at rest: %d ready\n", *ready);
  }
  std::vector<SizeResult> results;
  ColdStartBench bench(o, &daemon, config.time_scale, profile.h2d_pinned_bps);
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
    std::fprintf(stderr, "coldstart_bench: %s (phosd log: %s)\n", status.ToString().c_str(),
                 daemon.log_path().c_str());
    return 1;
  }

  bool met = true;
  for (const SizeResult& r : results) {
    for (const ScenarioResult& s : r.scenarios)
      met = met && s.unavailable.empty() && MissedTargets(r, s).empty();
  }
  RunInfo info{.command = CommandLine(argc, argv),
               .profile = config.profile,
               .time_scale = config.time_scale,
               .h2d_bps = profile.h2d_pinned_bps,
               .layers = kLayers,
               .max_instances = o.max_instances,
               .keep_alive_ms = o.keep_alive_ms,
               .prefault = prefault};
  // The report's table is the summary on the terminal too.
  std::string md = ColdStartMarkdown(results, info);
  std::printf("\n%s", md.c_str());
  if (!o.report.empty()) WriteSection(o.report, std::string("coldstart-") + config.profile, md);
  daemon.RemoveDirectories();
  return met ? 0 : 1;
}

}  // namespace
}  // namespace phos::bench

int main(int argc, char** argv) {
  return phos::bench::Main(argc, argv);
}
