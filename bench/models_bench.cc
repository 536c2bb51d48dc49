// Cold starts of real models (issue 11, docs/design.md "The bound"): llama decoders of several sizes
// and mixtures of experts brought up in each restore mode by one phosd on one simgpu device
// profile, against the bound max(B_read/W, E) + 5 ms and against the baselines measured in the
// same run.
//
//   B_read = the snapshot bytes the request's calls name (a llama token reads every weight, its KV
//            cache and its scratch: the whole snapshot; phos loads at buffer granularity; a moe
//            token reads all but the experts it does not run, which its answer reports),
//   W      = the profile's pinned host-to-device bandwidth (phosSimGetProfile),
//   E      = the warm first-token latency measured in the same run.
//
// First token: the X-Phos-Stage-First-Byte-Us header of a streamed request ({"stream": true}: the
// first piece is the first token) divided by the time scale, i.e. modelled ms from the request's
// arrival in phosd. Full response: the HTTP exchange's wall time at the client over the time scale.
// Each answer is compared with the warm instance's (tokens are deterministic). Before each cold
// start the previous extra instance has ended and a scrubbed pooled context is ready. The main
// daemon shares no weights between instances, so each restore pays for its own.
//
// Also measured, each in the same run and in a daemon of its own: simultaneous cold starts of
// different functions (link utilisation, p99); a second instance while the first runs, in a daemon
// that shares read-only weights (docs/design.md D14); restores from disk, in a daemon without a
// DRAM tier, the disk's rate read before each.
//
//   models_bench [--quick] [--sizes 256,1024,4096] [--experts 8,16] [--moe-mib 1024]
//                [--concurrency 1,4,16] [--concurrency-mib 128] [--concurrency-reps 5] [--second-mib 1024]
//                [--disk-mib 1024]
//                [--finetunes 32] [--finetune-base-mib 1024] [--cases llama,moe,bursts,second,finetunes,disk]
//                [--reps 10] [--fresh-reps 1] [--tokens 4] [--report PATH | --no-report] [--keep-data]
// --cases: run only these cases (default all); a run of some cases prints its results and leaves
// the report alone, whose section holds a whole run.
// --quick: 256 MiB models, 8 experts, bursts of 1 and 4, 3 repetitions. Profile: PHOS_SIMGPU_PROFILE
// (default a100-pcie4); time scale: PHOS_SIMGPU_TIME_SCALE (default the profile's, as the other
// end-to-end benchmarks: 20 for a100-pcie4, 44 for h100-pcie5; phosd_harness.h BenchTimeScale).
// Fresh-context modes (stop-the-world, cold-boot) pay the profile's context creation (62 s of wall
// each at scale 20), hence their own repetition count (0 skips them).
#include "models_bench.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "phos/base/status.h"
#include "phosd_harness.h"
#include "report.h"

namespace {

using phos::Result;
using phos::Status;
using phos::bench::Clock;
using phos::bench::Daemon;
using phos::bench::HttpResponse;
using phos::bench::kBoundFloorMs;
using phos::bench::Median;
using phos::bench::Percentile;
using namespace phos::bench::models;

class Bench {
 public:
  Bench(const Options& o, Daemon* d, const std::string& work, double scale, double h2d_bps)
      : o_(o), d_(d), work_(work), scale_(scale), h2d_bps_(h2d_bps) {}

  Result<CaseResult> Llama(int size_mib) {
    const std::string name = fmt::format("llama-{}", size_mib);
    const std::string dir = work_ + "/" + name;
    std::printf("\n== %s: checkpoint\n", name.c_str());
    std::fflush(stdout);
    // fp32, so the checkpoint's bytes are the device's; a short context keeps the KV cache small.
    PHOS_RETURN_IF_ERROR(MakeCheckpoint(dir, size_mib, 11, {}));
    std::printf("== %s: deploy\n", name.c_str());
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(Deploy(name, PHOS_LLAMA_FUNCTION, dir, Request({5, 6, 7}, false), 1, 2));
    PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::seconds(1200)));
    PHOS_ASSIGN_OR_RETURN(phos::bench::SnapshotSize size,
                          phos::bench::ReadSnapshotSize(d_->data_dir(), name));
    CaseResult r;
    r.label = fmt::format("llama {} MiB", size_mib);
    r.snapshot_bytes = size.buffer_bytes;
    r.read_bytes = size.buffer_bytes;  // every buffer is named by a call of the first token
    PHOS_RETURN_IF_ERROR(MeasureModes(name, Request({1, 2, 3, 4}, true), &r));
    PHOS_RETURN_IF_ERROR(Remove(name, dir));
    return r;
  }

  // A Mixtral-style model of o_.moe_mib with `experts` experts per layer, 2 per token. The request
  // is one token generating one: it runs 2 experts per layer, and reports which (B_read counts the
  // snapshot but the experts it did not run).
  Result<CaseResult> Moe(int experts) {
    const std::string name = fmt::format("moe-{}", experts);
    const std::string dir = work_ + "/" + name;
    std::printf("\n== %s: checkpoint\n", name.c_str());
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(MakeCheckpoint(dir, o_.moe_mib, 12,
                                        {"--experts", std::to_string(experts), "--experts-per-token", "2"}));
    PHOS_ASSIGN_OR_RETURN(uint64_t expert_bytes, ExpertBytes(dir));
    std::printf("== %s: deploy\n", name.c_str());
    std::fflush(stdout);
    const std::string request = R"({"tokens": [3], "max_new_tokens": 1, "report_experts": true})";
    PHOS_RETURN_IF_ERROR(
        Deploy(name, PHOS_MOE_FUNCTION, dir, R"({"tokens": [5], "max_new_tokens": 1})", 1, 2));
    PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::seconds(1200)));
    PHOS_ASSIGN_OR_RETURN(phos::bench::SnapshotSize size,
                          phos::bench::ReadSnapshotSize(d_->data_dir(), name));
    CaseResult r;
    r.label = fmt::format("moe {} MiB, {} experts per layer, 2 per token", o_.moe_mib, experts);
    r.target_vs_bound = kMoeVsBound;
    r.target_vs_eager = kMoeVsEager;
    r.snapshot_bytes = size.buffer_bytes;
    PHOS_RETURN_IF_ERROR(MeasureModes(name, request, &r));
    nlohmann::json answer = nlohmann::json::parse(expected_, nullptr, false);
    if (!answer.is_object() || !answer.contains("experts") || !answer["experts"].is_array() ||
        answer["experts"].empty()) {
      return Status::Internal("moe's answer does not say which experts ran: " + expected_);
    }
    PHOS_ASSIGN_OR_RETURN(nlohmann::json config, ReadConfig(dir));
    const uint64_t all_experts = config["num_hidden_layers"].get<uint64_t>() * experts;
    const uint64_t ran = answer["experts"].size();
    r.read_bytes = size.buffer_bytes - (all_experts - ran) * expert_bytes;
    r.read_note = fmt::format("{} of {} experts ran ({:.1f}% of the expert bytes)", ran, all_experts,
                              100.0 * ran / all_experts);
    r.transfer_ms = static_cast<double>(r.read_bytes) / h2d_bps_ * 1e3;
    r.bound_ms = phos::bench::BoundMs(r.transfer_ms, r.compute_ms);
    PHOS_RETURN_IF_ERROR(Remove(name, dir));
    return r;
  }

  // llama of `size_mib` restored from the store's disk (this daemon has no DRAM tier): phos, its
  // first-touch order off (no-order), and eager, taking turns within each repetition. The bound's
  // rate is the slower of the link and the disk. The disk's rate is read right before each restore
  // (the store's segments, direct I/O), and each restore is set against the bound of its own
  // reading: this host's disk moves by half within a case, so one reading beforehand, or modes
  // measured one after another, compare restores that met different disks. Disk reads take real
  // time while the device's is scaled, so the modelled disk rate is the real one times the time
  // scale.
  Result<CaseResult> DiskCold(int size_mib) {
    const std::string name = fmt::format("llama-disk-{}", size_mib);
    const std::string dir = work_ + "/" + name;
    std::printf("\n== %s: checkpoint and deploy\n", name.c_str());
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(MakeCheckpoint(dir, size_mib, 13, {}));
    PHOS_RETURN_IF_ERROR(Deploy(name, PHOS_LLAMA_FUNCTION, dir, Request({5, 6, 7}, false), 1, 2));
    PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::seconds(1200)));
    PHOS_ASSIGN_OR_RETURN(phos::bench::SnapshotSize size,
                          phos::bench::ReadSnapshotSize(d_->data_dir(), name));
    CaseResult r;
    r.label = fmt::format("llama {} MiB from disk (no DRAM tier)", size_mib);
    r.snapshot_bytes = size.buffer_bytes;
    r.read_bytes = size.buffer_bytes;
    auto read_disk = [&](const std::string& mode) -> Result<double> {
      if (mode == "warm") return std::nan("");
      return DiskRate(d_->data_dir() + "/store/segments");
    };
    PHOS_RETURN_IF_ERROR(Measure(name, Request({1, 2, 3, 4}, true), &r, {"warm", "phos", "no-order", "eager"},
                                 /*interleave=*/true, read_disk));
    // The rate min(W, disk) a reading gives, in modelled bytes a second (Measure set E).
    auto rate_at = [&](double bps) { return std::min(h2d_bps_, bps * scale_); };
    std::vector<double> disk_bps;
    for (ModeResult& m : r.modes) {
      for (Sample& s : m.samples) {
        if (std::isnan(s.disk_bps)) continue;
        disk_bps.push_back(s.disk_bps);
        s.bound_ms = phos::bench::BoundMs(static_cast<double>(r.read_bytes) / rate_at(s.disk_bps) * 1e3, r.compute_ms);
      }
    }
    if (disk_bps.empty()) return Status::Internal("disk-cold: no disk reading");
    const double disk = Median(disk_bps);
    const double rate = rate_at(disk);
    r.read_note = fmt::format(
        "disk {:.2f} GB/s measured (median of {} readings, one before each restore: {:.2f}-{:.2f}), {:.1f} GB/s "
        "modelled; rate min(W, disk) = {:.1f} GB/s; the modes take turns, and each restore's / bound is "
        "against the bound of its own reading (median over the restores)",
        disk / 1e9, disk_bps.size(), *std::min_element(disk_bps.begin(), disk_bps.end()) / 1e9,
        *std::max_element(disk_bps.begin(), disk_bps.end()) / 1e9, disk * scale_ / 1e9, rate / 1e9);
    r.transfer_ms = static_cast<double>(r.read_bytes) / rate * 1e3;
    r.bound_ms = phos::bench::BoundMs(r.transfer_ms, r.compute_ms);
    PHOS_RETURN_IF_ERROR(Remove(name, dir));
    return r;
  }

  // This daemon shares read-only weights between instances (docs/design.md D14). llama of
  // `size_mib`, scaled to zero; each repetition restores a first instance, then at once a second
  // one while the first is still there: the second maps the first's weights.
  Result<SecondInstanceResult> SecondInstance(int size_mib) {
    const std::string name = fmt::format("llama-second-{}", size_mib);
    const std::string dir = work_ + "/" + name;
    std::printf("\n== %s: checkpoint and deploy\n", name.c_str());
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(MakeCheckpoint(dir, size_mib, 14, {}));
    PHOS_RETURN_IF_ERROR(Deploy(name, PHOS_LLAMA_FUNCTION, dir, Request({5, 6, 7}, false), 0, 2));
    PHOS_ASSIGN_OR_RETURN(phos::bench::SnapshotSize size,
                          phos::bench::ReadSnapshotSize(d_->data_dir(), name));
    SecondInstanceResult r{.size_mib = size_mib, .snapshot_bytes = size.buffer_bytes};
    PHOS_ASSIGN_OR_RETURN(r.weight_bytes, WeightBytes(dir));
    const std::string request = Request({1, 2, 3, 4}, true);
    const std::string url = d_->endpoint() + "/v1/functions/" + name + "/invoke";
    const std::vector<std::string> headers = {"X-Phos-Restore-Mode: phos", "X-Phos-Timeout-Ms: 1200000"};
    const std::vector<std::string> warm_headers = {"X-Phos-Restore-Mode: warm", "X-Phos-Timeout-Ms: 1200000"};
    for (int rep = 0; rep < o_.second_reps; ++rep) {
      PHOS_RETURN_IF_ERROR(d_->WaitInstances(
          name, [](const phos::bench::InstanceCounts& c) { return c.total() == 0 && c.ending == 0; },
          std::chrono::seconds(600), "scaled to zero"));
      PHOS_RETURN_IF_ERROR(d_->WaitPoolReady(2, std::chrono::minutes(30)));
      PHOS_ASSIGN_OR_RETURN(HttpResponse first, phos::bench::Http(url, request, headers));
      PHOS_ASSIGN_OR_RETURN(HttpResponse second, phos::bench::Http(url, request, headers));
      PHOS_ASSIGN_OR_RETURN(HttpResponse warm, phos::bench::Http(url, request, warm_headers));
      for (const HttpResponse* h : {&first, &second, &warm}) {
        if (h->status != 200)
          return Status::Internal(fmt::format("{}: HTTP {}: {}", name, h->status, h->body));
      }
      if (second.body != first.body || warm.body != first.body) {
        return Status::Internal(fmt::format("the first instance answered {}, the second {}, a warm one {}",
                                            first.body, second.body, warm.body));
      }
      std::optional<double> t1 = phos::bench::StageMs(first, "first-byte", scale_);
      std::optional<double> t2 = phos::bench::StageMs(second, "first-byte", scale_);
      std::optional<double> tw = phos::bench::StageMs(warm, "first-byte", scale_);
      auto shared = second.headers.find("x-phos-shared-bytes");
      if (!t1 || !t2 || !tw || shared == second.headers.end()) {
        return Status::Internal(name + ": an answer lacks its first-byte stage or X-Phos-Shared-Bytes");
      }
      const double shared_bytes = std::strtod(shared->second.c_str(), nullptr);
      r.first_ms.push_back(*t1);
      r.second_ms.push_back(*t2);
      r.warm_ms.push_back(*tw);
      r.shared_mib.push_back(shared_bytes / 1048576.0);
      r.added_mib.push_back((static_cast<double>(r.snapshot_bytes) - shared_bytes) / 1048576.0);
      for (int i = 0; i < 2; ++i) {
        for (const char* stage : kSecondStages) {
          std::optional<double> ms = phos::bench::StageMs(i == 0 ? first : second, stage, scale_);
          if (ms) r.stage_ms[i][stage].push_back(*ms);
        }
      }
      std::printf("%16s %d/%d: first %.2f ms, second %.2f ms, warm %.2f ms, second shared %.1f MiB (modelled)\n",
                  "second instance", rep + 1, o_.second_reps, *t1, *t2, *tw, r.shared_mib.back());
      std::fflush(stdout);
    }
    PHOS_RETURN_IF_ERROR(Remove(name, dir));
    return r;
  }

  // o_.finetunes LoRA adapters of one base, each deployed as a function (scaled to zero); the store
  // and DRAM tier gauges after every deploy; then 4 of them restored to run at once, one first and
  // three while it runs, each mapping the base the first registered (this daemon shares weights).
  Result<FineTunesResult> FineTunes() {
    FineTunesResult r{
        .n = o_.finetunes, .base_mib = o_.finetune_base_mib, .running = std::min(4, o_.finetunes)};
    const std::string base = work_ + "/base";
    std::printf("\n== %d fine-tunes of a %d MiB base: checkpoints\n", r.n, r.base_mib);
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(MakeCheckpoint(base, r.base_mib, 15, {}));
    PHOS_ASSIGN_OR_RETURN(r.base_bytes, WeightBytes(base));
    std::vector<std::string> names;
    for (int i = 0; i < r.n; ++i) {
      const std::string name = fmt::format("finetune-{}", i);
      const std::string adapter = work_ + "/" + name;
      PHOS_RETURN_IF_ERROR(
          MakeCheckpoint("", r.base_mib, 15,
                         {"--adapter-out", adapter, "--rank", "8", "--adapter-seed", std::to_string(i)}));
      if (i == 0) {
        PHOS_ASSIGN_OR_RETURN(r.adapter_bytes, WeightBytes(adapter));
      }
      std::printf("== %s: deploy\n", name.c_str());
      std::fflush(stdout);
      PHOS_RETURN_IF_ERROR(
          Deploy(name, PHOS_LLAMA_FUNCTION, base, Request({5, 6, 7}, false), 0, 1, {"--adapter", adapter}));
      names.push_back(name);
    }
    PHOS_ASSIGN_OR_RETURN(std::string metrics, d_->Metrics());
    PHOS_ASSIGN_OR_RETURN(r.store_unique, phos::bench::MetricValue(metrics, "phos_store_unique_bytes"));
    PHOS_ASSIGN_OR_RETURN(r.store_logical, phos::bench::MetricValue(metrics, "phos_store_logical_bytes"));
    PHOS_ASSIGN_OR_RETURN(r.dram_pinned, phos::bench::MetricValue(metrics, "phos_dram_tier_pinned_bytes"));
    for (const std::string& name : names) {
      PHOS_RETURN_IF_ERROR(d_->WaitInstances(
          name, [](const phos::bench::InstanceCounts& c) { return c.total() == 0 && c.ending == 0; },
          std::chrono::seconds(600), "scaled to zero"));
    }
    PHOS_RETURN_IF_ERROR(d_->WaitPoolReady(r.running, std::chrono::minutes(30)));
    const std::string request = Request({1, 2, 3, 4}, false);
    const std::vector<std::string> headers = {"X-Phos-Restore-Mode: phos", "X-Phos-Timeout-Ms: 1200000"};
    auto url = [&](int i) { return d_->endpoint() + "/v1/functions/" + names[i] + "/invoke"; };
    std::vector<Result<HttpResponse>> answers;
    answers.push_back(phos::bench::Http(url(0), request, headers));
    std::vector<Result<HttpResponse>> rest(r.running - 1, Status::Internal("not sent"));
    std::vector<std::thread> threads;
    for (int i = 1; i < r.running; ++i) {
      threads.emplace_back([&, i] { rest[i - 1] = phos::bench::Http(url(i), request, headers); });
    }
    for (std::thread& t : threads) t.join();
    for (Result<HttpResponse>& a : rest) answers.push_back(std::move(a));
    for (Result<HttpResponse>& a : answers) {
      if (!a.ok()) return a.status();
      if (a->status != 200)
        return Status::Internal(fmt::format("fine-tune: HTTP {}: {}", a->status, a->body));
      auto shared = a->headers.find("x-phos-shared-bytes");
      auto snapshot = a->headers.find("x-phos-snapshot-bytes");
      if (shared == a->headers.end() || snapshot == a->headers.end()) {
        return Status::Internal("a fine-tune's answer lacks X-Phos-Shared-Bytes or X-Phos-Snapshot-Bytes");
      }
      const double s = std::strtod(shared->second.c_str(), nullptr);
      r.shared_mib.push_back(s / 1048576.0);
      r.added_mib.push_back((std::strtod(snapshot->second.c_str(), nullptr) - s) / 1048576.0);
    }
    std::printf(
        "%16s: store %.1f MiB unique of %.1f MiB named, DRAM tier %.1f MiB; %d running added %.1f MiB\n",
        "fine-tunes", r.store_unique / 1048576.0, r.store_logical / 1048576.0, r.dram_pinned / 1048576.0,
        r.running, std::accumulate(r.added_mib.begin(), r.added_mib.end(), 0.0));
    std::fflush(stdout);
    return r;
  }

  // n simultaneous requests, each to its own function (llama of o_.concurrency_mib, its own seed,
  // scaled to zero between repetitions), restored in phos mode on device 0. Link utilisation =
  // the snapshots' bytes over the last request's resident stage, over W.
  Result<std::vector<BurstResult>> Bursts() {
    const int most = *std::max_element(o_.concurrency.begin(), o_.concurrency.end());
    std::vector<std::string> names;
    uint64_t snapshot_bytes = 0;
    for (int i = 0; i < most; ++i) {
      const std::string name = fmt::format("burst-{}", i);
      const std::string dir = work_ + "/" + name;
      std::printf("\n== %s: checkpoint and deploy\n", name.c_str());
      std::fflush(stdout);
      PHOS_RETURN_IF_ERROR(MakeCheckpoint(dir, o_.concurrency_mib, 100 + i, {}));
      PHOS_RETURN_IF_ERROR(Deploy(name, PHOS_LLAMA_FUNCTION, dir, Request({5, 6, 7}, false), 0, 1));
      PHOS_ASSIGN_OR_RETURN(phos::bench::SnapshotSize size,
                            phos::bench::ReadSnapshotSize(d_->data_dir(), name));
      snapshot_bytes = size.buffer_bytes;  // the same shape for every seed
      names.push_back(name);
    }
    std::vector<BurstResult> results;
    for (int n : o_.concurrency) {
      BurstResult b{.n = n};
      // Untimed first: each function's first restore of this size of burst finds its snapshot's
      // host pages untouched for minutes, which this host makes several times slower to read
      // (docs/benchmarks.md, "Host memory left idle"). Its link share is reported apart.
      PHOS_ASSIGN_OR_RETURN(BurstSample first, Burst(names, n, snapshot_bytes, "first, untimed"));
      b.untimed_utilisation = first.utilisation;
      b.untimed_h2d_host_bound = first.h2d_host_bound;
      for (int rep = 0; rep < o_.concurrency_reps; ++rep) {
        PHOS_ASSIGN_OR_RETURN(BurstSample s,
                              Burst(names, n, snapshot_bytes, fmt::format("{}/{}", rep + 1, o_.concurrency_reps)));
        b.first_byte_ms.insert(b.first_byte_ms.end(), s.first_byte_ms.begin(), s.first_byte_ms.end());
        b.utilisation.push_back(s.utilisation);
        b.first_lease_ms.push_back(s.first_lease_ms);
        b.last_lease_ms.push_back(s.last_lease_ms);
        b.last_cpu_resume_ms.push_back(s.last_cpu_resume_ms);
        b.last_resident_ms.push_back(s.last_resident_ms);
        b.link_ms.push_back(s.link_ms);
        if (s.h2d_host_bound) {
          b.h2d_host_bound.push_back(*s.h2d_host_bound);
          b.compute_host_bound.push_back(*s.compute_host_bound);
        }
      }
      results.push_back(std::move(b));
    }
    burst_snapshot_bytes_ = snapshot_bytes;
    return results;
  }
  uint64_t burst_snapshot_bytes() const { return burst_snapshot_bytes_; }

 private:
  // One burst: the first n functions of `names`, scaled to zero, each sent a request at once.
  struct BurstSample {
    std::vector<double> first_byte_ms;
    double utilisation = 0, first_lease_ms = 0, last_lease_ms = 0, last_cpu_resume_ms = 0, last_resident_ms = 0,
           link_ms = 0;
    std::optional<double> h2d_host_bound, compute_host_bound;  // nullopt: phosd does not export them
  };
  Result<BurstSample> Burst(const std::vector<std::string>& names, int n, uint64_t snapshot_bytes,
                            const std::string& label) {
    static const std::string kRequest = R"({"tokens": [1, 2, 3, 4], "max_new_tokens": 1})";
    for (const std::string& name : names) {
      PHOS_RETURN_IF_ERROR(d_->WaitInstances(
          name, [](const phos::bench::InstanceCounts& c) { return c.total() == 0 && c.ending == 0; },
          std::chrono::seconds(600), "scaled to zero"));
    }
    PHOS_RETURN_IF_ERROR(d_->WaitPoolReady(n, std::chrono::minutes(30)));
    // simgpu's engine counts around the burst: how much of it the host, not the model, timed.
    const Result<std::string> metrics_before = d_->Metrics();
    std::vector<Result<HttpResponse>> answers(n, Status::Internal("not sent"));
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        answers[i] = phos::bench::Http(d_->endpoint() + "/v1/functions/" + names[i] + "/invoke", kRequest,
                                       {"X-Phos-Restore-Mode: phos", "X-Phos-Timeout-Ms: 1200000"});
      });
    }
    for (std::thread& t : threads) t.join();
    BurstSample s;
    std::string host_bound;
    if (const Result<std::string> metrics_after = d_->Metrics(); metrics_before.ok() && metrics_after.ok()) {
      const std::optional<HostBound> copies = HostBoundBetween(*metrics_before, *metrics_after, "h2d");
      const std::optional<HostBound> compute = HostBoundBetween(*metrics_before, *metrics_after, "compute");
      if (copies && compute) {
        s.h2d_host_bound = copies->share;
        s.compute_host_bound = compute->share;
        host_bound = fmt::format("; host-bound: {:.0f}% of {:.0f} copies in, {:.0f}% of {:.0f} compute operations",
                                 100 * copies->share, copies->ops, 100 * compute->share, compute->ops);
      }
    }
    s.first_lease_ms = 1e300;
    for (int i = 0; i < n; ++i) {
      if (!answers[i].ok()) return answers[i].status();
      const HttpResponse& r = *answers[i];
      if (r.status != 200) return Status::Internal(fmt::format("burst of {}: HTTP {}: {}", n, r.status, r.body));
      std::optional<double> first = phos::bench::StageMs(r, "first-byte", scale_);
      std::optional<double> resident = phos::bench::StageMs(r, "resident", scale_);
      if (!first || !resident) return Status::Internal(fmt::format("burst of {}: no first-byte or resident stage", n));
      s.first_byte_ms.push_back(*first);
      s.last_resident_ms = std::max(s.last_resident_ms, *resident);
      if (std::optional<double> lease = phos::bench::StageMs(r, "lease", scale_)) {
        s.first_lease_ms = std::min(s.first_lease_ms, *lease);
        s.last_lease_ms = std::max(s.last_lease_ms, *lease);
      }
      if (std::optional<double> resumed = phos::bench::StageMs(r, "cpu-resume", scale_)) {
        s.last_cpu_resume_ms = std::max(s.last_cpu_resume_ms, *resumed);
      }
    }
    s.link_ms = static_cast<double>(snapshot_bytes) * n / h2d_bps_ * 1e3;
    s.utilisation = s.link_ms / s.last_resident_ms;
    std::printf("%16s %s: p99 first byte %.1f ms, link %.0f%% (modelled)%s\n", fmt::format("{} at once", n).c_str(),
                label.c_str(), Percentile(s.first_byte_ms, 99), 100 * s.utilisation, host_bound.c_str());
    std::fflush(stdout);
    return s;
  }

  // Device 0's operations of one simgpu engine between two /metrics scrapes: how many had a
  // modelled cost, and the share of them whose work on the host took longer than modelled.
  struct HostBound {
    double ops = 0;
    double share = 0;
  };
  // nullopt when phosd does not export the counts (not on simgpu).
  static std::optional<HostBound> HostBoundBetween(std::string_view before, std::string_view after,
                                                   const char* engine) {
    auto count = [&](std::string_view text, const char* family) {
      return phos::bench::MetricValue(text, family, {{"device", "0"}, {"engine", engine}});
    };
    const Result<double> paced0 = count(before, "phos_simgpu_paced_ops_total");
    const Result<double> paced1 = count(after, "phos_simgpu_paced_ops_total");
    const Result<double> bound0 = count(before, "phos_simgpu_host_bound_ops_total");
    const Result<double> bound1 = count(after, "phos_simgpu_host_bound_ops_total");
    if (!paced0.ok() || !paced1.ok() || !bound0.ok() || !bound1.ok()) return std::nullopt;
    const double ops = *paced1 - *paced0;
    return HostBound{.ops = ops, .share = ops > 0 ? (*bound1 - *bound0) / ops : 0.0};
  }

  // A random fp32 checkpoint (the device's bytes are the checkpoint's) with a short context, which
  // keeps the KV cache small; `extra` adds options (experts; `--adapter-out DIR` with no `dir`
  // writes only an adapter for the shape).
  static Status MakeCheckpoint(const std::string& dir, int size_mib, int seed,
                               const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"python3",
                                     PHOS_SOURCE_DIR "/scripts/make-checkpoint.py",
                                     "--size-mib",
                                     std::to_string(size_mib),
                                     "--dtype",
                                     "f32",
                                     "--vocab",
                                     "8192",
                                     "--max-position-embeddings",
                                     "64",
                                     "--seed",
                                     std::to_string(seed)};
    if (!dir.empty()) args.insert(args.end(), {"--out", dir});
    args.insert(args.end(), extra.begin(), extra.end());
    return phos::bench::Run(args).status();
  }

  // `function_args` follow the model directory on the function's command line.
  Status Deploy(const std::string& name, const char* executable, const std::string& model_dir,
                const std::string& sample, int instances, int max_instances,
                const std::vector<std::string>& function_args = {}) {
    std::vector<std::string> args = {PHOS_PHOS_FN,
                                     "--endpoint",
                                     d_->endpoint(),
                                     "deploy",
                                     name,
                                     executable,
                                     "--instances",
                                     std::to_string(instances),
                                     "--max-instances",
                                     std::to_string(max_instances),
                                     "--sample",
                                     sample,
                                     "--",
                                     "--model",
                                     model_dir};
    args.insert(args.end(), function_args.begin(), function_args.end());
    return phos::bench::Run(args).status();
  }

  Status Remove(const std::string& name, const std::string& dir) {
    PHOS_RETURN_IF_ERROR(phos::bench::Run({PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "rm", name}).status());
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return Status::Ok();
  }

  std::string Request(const std::vector<int>& prompt, bool stream) const {
    std::string ids;
    for (int t : prompt) ids += (ids.empty() ? "" : ", ") + std::to_string(t);
    return fmt::format(R"({{"tokens": [{}], "max_new_tokens": {}, "stream": {}}})", ids, o_.tokens,
                       stream ? "true" : "false");
  }

  // Bytes per second of reading every file in `dir` with O_DIRECT, 4 MiB at a time (real time).
  static Result<double> DiskRate(const std::string& dir) {
    constexpr size_t kBlock = 4 << 20;
    void* buffer = std::aligned_alloc(4096, kBlock);
    if (buffer == nullptr) return Status::Internal("disk rate: no aligned buffer");
    uint64_t bytes = 0;
    const Clock::time_point start = Clock::now();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const int fd = ::open(entry.path().c_str(), O_RDONLY | O_DIRECT);
      if (fd < 0) continue;
      for (ssize_t n; (n = ::read(fd, buffer, kBlock)) > 0;) bytes += static_cast<uint64_t>(n);
      ::close(fd);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::free(buffer);
    if (bytes == 0 || seconds <= 0) return Status::Internal("disk rate: nothing read in " + dir);
    return static_cast<double>(bytes) / seconds;
  }

  static Result<nlohmann::json> ReadConfig(const std::string& dir) {
    std::ifstream in(dir + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return Status::Internal("cannot read " + dir + "/config.json");
    return config;
  }

  // The checkpoint's tensor bytes in fp32 (the device's): the safetensors files' sizes, less their
  // headers, for an fp32 checkpoint.
  static Result<uint64_t> WeightBytes(const std::string& dir) {
    uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (entry.path().extension() != ".safetensors") continue;
      std::ifstream in(entry.path(), std::ios::binary);
      uint64_t header = 0;
      in.read(reinterpret_cast<char*>(&header), sizeof(header));
      if (!in) return Status::Internal("cannot read " + entry.path().string());
      bytes += entry.file_size() - sizeof(header) - header;
    }
    if (bytes == 0) return Status::Internal("no tensors in " + dir);
    return bytes;
  }

  // One expert's device bytes: w1, w3 [intermediate, hidden] and w2 [hidden, intermediate] in fp32.
  static Result<uint64_t> ExpertBytes(const std::string& dir) {
    PHOS_ASSIGN_OR_RETURN(nlohmann::json config, ReadConfig(dir));
    if (!config.contains("hidden_size") || !config.contains("intermediate_size") ||
        !config.contains("num_hidden_layers")) {
      return Status::Internal(dir + "/config.json lacks the sizes");
    }
    return 3 * config["hidden_size"].get<uint64_t>() * config["intermediate_size"].get<uint64_t>() *
           sizeof(float);
  }

  // Each mode's repetitions, one mode after another; warm must come first (its answer is the one the
  // others must equal, its first byte is E).
  Status MeasureModes(const std::string& name, const std::string& request, CaseResult* r,
                      const std::vector<std::string>& modes = {std::begin(kModes), std::end(kModes)}) {
    return Measure(name, request, r, modes, /*interleave=*/false, nullptr);
  }

  // As MeasureModes, and:
  // - with `interleave`, the modes after warm take turns within each repetition (one of each,
  //   then the next round), so that a host that drifts during the case weighs on every mode alike;
  // - `before_each`, when given, runs before each restore, once the function settled; what it
  //   returns is kept as that sample's disk_bps.
  Status Measure(const std::string& name, const std::string& request, CaseResult* r,
                 const std::vector<std::string>& modes, bool interleave,
                 const std::function<Result<double>(const std::string& mode)>& before_each) {
    expected_.clear();
    auto reps_of = [&](const ModeResult& m) {
      return m.mode == "stop-the-world" || m.mode == "cold-boot" ? o_.fresh_reps : o_.reps;
    };
    std::vector<ModeResult> results;
    for (const std::string& mode : modes) {
      if (ModeResult m{mode, {}}; reps_of(m) > 0) results.push_back(std::move(m));
    }
    auto run = [&](ModeResult& m) -> Status {
      PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::seconds(1200)));
      double disk_bps = std::nan("");
      if (before_each) {
        PHOS_ASSIGN_OR_RETURN(disk_bps, before_each(m.mode));
      }
      PHOS_ASSIGN_OR_RETURN(Sample s, Invoke(name, m.mode, request));
      s.disk_bps = disk_bps;
      m.samples.push_back(s);
      std::printf(
          "%16s %zu/%d: first byte %.2f ms, first launch %.2f ms, full %.2f ms, loaded %.1f MiB, misses %lld, "
          "modules loaded %lld (modelled)%s\n",
          m.mode.c_str(), m.samples.size(), reps_of(m), s.first_byte_ms, s.first_launch_ms, s.full_ms, s.loaded_mib,
          static_cast<long long>(s.misses), static_cast<long long>(s.modules_loaded),
          std::isnan(disk_bps) ? "" : fmt::format("; disk {:.2f} GB/s before", disk_bps / 1e9).c_str());
      std::fflush(stdout);
      return Status::Ok();
    };
    if (!interleave) {
      for (ModeResult& m : results) {
        for (int i = 0; i < reps_of(m); ++i) PHOS_RETURN_IF_ERROR(run(m));
      }
    } else {
      int most = 0;
      for (ModeResult& m : results) most = std::max(most, reps_of(m));
      if (!results.empty()) {
        for (int i = 0; i < reps_of(results[0]); ++i) PHOS_RETURN_IF_ERROR(run(results[0]));
      }
      for (int i = 0; i < most; ++i) {
        for (size_t k = 1; k < results.size(); ++k) {
          if (i < reps_of(results[k])) PHOS_RETURN_IF_ERROR(run(results[k]));
        }
      }
    }
    r->modes = std::move(results);
    r->transfer_ms = static_cast<double>(r->read_bytes) / h2d_bps_ * 1e3;
    r->compute_ms = r->Find("warm")->FirstByte();
    r->bound_ms = phos::bench::BoundMs(r->transfer_ms, r->compute_ms);
    return Status::Ok();
  }

  Result<Sample> Invoke(const std::string& name, const std::string& mode, const std::string& request) {
    const Clock::time_point sent = Clock::now();
    PHOS_ASSIGN_OR_RETURN(HttpResponse r,
                          phos::bench::Http(d_->endpoint() + "/v1/functions/" + name + "/invoke", request,
                                            {"X-Phos-Restore-Mode: " + mode, "X-Phos-Timeout-Ms: 1200000"}));
    const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - sent).count();
    if (r.status != 200)
      return Status::Internal(fmt::format("{} invoke: HTTP {}: {}", mode, r.status, r.body));
    if (r.headers["x-phos-restore-mode"] != mode) {
      return Status::Internal(
          fmt::format("asked for {}, served as '{}'", mode, r.headers["x-phos-restore-mode"]));
    }
    if (expected_.empty()) expected_ = r.body;  // warm goes first
    if (r.body != expected_) {
      return Status::Internal(fmt::format("{} answered {} where warm answered {}", mode, r.body, expected_));
    }
    Sample s;
    std::optional<double> first = phos::bench::StageMs(r, "first-byte", scale_);
    if (!first) return Status::Internal(mode + " answer has no first-byte stage");
    s.first_byte_ms = *first;
    for (auto [stage, field] :
         {std::pair{"cpu-resume", &Sample::cpu_resume_ms},
          std::pair{"first-launch", &Sample::first_launch_ms}, std::pair{"resident", &Sample::resident_ms}}) {
      if (std::optional<double> ms = phos::bench::StageMs(r, stage, scale_)) s.*field = *ms;
    }
    s.full_ms = wall_ms / scale_;
    if (auto it = r.headers.find("x-phos-loaded-bytes-at-first-byte"); it != r.headers.end()) {
      s.loaded_mib = std::strtod(it->second.c_str(), nullptr) / (1 << 20);
    }
    if (auto it = r.headers.find("x-phos-speculation-misses"); it != r.headers.end()) {
      s.misses = std::strtoll(it->second.c_str(), nullptr, 10);
    }
    if (auto it = r.headers.find("x-phos-modules-loaded"); it != r.headers.end()) {
      s.modules_loaded = std::strtoll(it->second.c_str(), nullptr, 10);
    }
    return s;
  }

  const Options& o_;
  Daemon* d_;
  std::string work_;
  double scale_;
  double h2d_bps_;
  std::string expected_;
  uint64_t burst_snapshot_bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"models_bench: cold starts of real models in every restore mode against the bound"};
  app.add_flag("--quick", o.quick, "one size (256 MiB), 3 repetitions");
  app.add_option("--sizes", o.sizes_mib, "llama sizes in MiB")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--reps", o.reps, "repetitions of warm, phos and eager")->check(CLI::PositiveNumber);
  app.add_option("--fresh-reps", o.fresh_reps, "repetitions of stop-the-world and cold-boot (0: skip them)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--experts", o.experts, "moe: experts per layer, one model each")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--moe-mib", o.moe_mib, "moe: model size in MiB")->check(CLI::PositiveNumber);
  app.add_option("--concurrency", o.concurrency, "simultaneous cold starts, one run each")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency-mib", o.concurrency_mib, "size of each function of the bursts")
      ->check(CLI::PositiveNumber);
  app.add_option("--concurrency-reps", o.concurrency_reps, "repetitions of each burst")->check(CLI::PositiveNumber);
  app.add_option("--disk-mib", o.disk_mib, "disk-cold case: llama size in MiB (0: none)");
  app.add_option("--second-mib", o.second_mib, "second-instance case: llama size in MiB (0: none)");
  app.add_option("--finetunes", o.finetunes, "LoRA fine-tunes of one base (0: none)");
  app.add_option("--finetune-base-mib", o.finetune_base_mib, "the fine-tunes' base model in MiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--tokens", o.tokens, "tokens generated per request")->check(CLI::PositiveNumber);
  app.add_option("--report", o.report, "markdown file whose section to replace");
  bool no_report = false;
  app.add_flag("--no-report", no_report, "print only");
  std::vector<std::string> cases;
  app.add_option("--cases", cases, "run only these cases (the report is then left alone)")
      ->delimiter(',')
      ->check(CLI::IsMember({"llama", "moe", "bursts", "second", "finetunes", "disk"}));
  app.add_flag("--keep-data", o.keep_data, "keep phosd's data directory");
  CLI11_PARSE(app, argc, argv);
  if (no_report || !cases.empty()) o.report.clear();
  if (o.quick) {
    if (app.count("--sizes") == 0) o.sizes_mib = {256};
    if (app.count("--reps") == 0) o.reps = 3;
    if (app.count("--experts") == 0) o.experts = {8};
    if (app.count("--moe-mib") == 0) o.moe_mib = 256;
    if (app.count("--concurrency") == 0) o.concurrency = {1, 4};
    o.concurrency_reps = 2;
    if (app.count("--disk-mib") == 0) o.disk_mib = 256;
    if (app.count("--second-mib") == 0) o.second_mib = 256;
    o.second_reps = 2;
    if (app.count("--finetunes") == 0) o.finetunes = 4;
    if (app.count("--finetune-base-mib") == 0) o.finetune_base_mib = 256;
  }
  auto runs = [&](const char* name) { return cases.empty() || std::find(cases.begin(), cases.end(), name) != cases.end(); };
  if (!runs("llama")) o.sizes_mib.clear();
  if (!runs("moe")) o.experts.clear();
  if (!runs("bursts")) o.concurrency.clear();
  if (!runs("second")) o.second_mib = 0;
  if (!runs("finetunes")) o.finetunes = 0;
  if (!runs("disk")) o.disk_mib = 0;

  int largest = std::max({o.second_mib, o.finetune_base_mib * (o.finetunes > 0), o.disk_mib,
                          o.moe_mib * !o.experts.empty(), o.concurrency_mib * !o.concurrency.empty()});
  for (int size : o.sizes_mib) largest = std::max(largest, size);
  Result<phos::bench::SimDevice> device = phos::bench::OpenSimDevice();
  if (!device.ok()) {
    std::fprintf(stderr, "models_bench: %s\n", device.status().ToString().c_str());
    return 1;
  }
  const double scale = device->config.time_scale;
  const double h2d = device->profile.h2d_pinned_bps;
  phos::bench::WarnIfNoShmemHugePages("models_bench");
  // Host pages for two instances of the largest model and a spare GiB, or for the largest burst of
  // simultaneous cold starts (the simulator's host work must not stand in for the modelled device:
  // docs/benchmarks.md, issue 18's section). Set after this process's own simgpu is open: the
  // pages are phosd's, and a second copy here would take as much host memory again.
  const int most = o.concurrency.empty() ? 0 : *std::max_element(o.concurrency.begin(), o.concurrency.end());
  const uint64_t burst_mib = static_cast<uint64_t>(most) * o.concurrency_mib * 2;
  const uint64_t prefault_mib = std::max<uint64_t>(static_cast<uint64_t>(largest) * 2 + 1024, burst_mib);
  if (largest > 0) setenv("PHOS_SIMGPU_PREFAULT", fmt::format("{}M", prefault_mib).c_str(), /*overwrite=*/0);

  Daemon daemon;
  // Sharing off: every restore here is a first instance, which pays for its weights (the second
  // instance's case has a daemon of its own).
  const bool main_cases = !o.sizes_mib.empty() || !o.experts.empty();
  Status status = Status::Ok();
  if (main_cases) {
    status = daemon.Start("models-bench",
                          {"--pool-min", "2", "--pool-max", "6", "--keep-alive-ms", "1500", "--share-weights",
                           "false", "--dram-mib", std::to_string(std::max(4096, largest + 512))});
  }
  if (main_cases && status.ok()) {
    std::printf("phosd at %s, data %s, log %s\n", daemon.endpoint().c_str(), daemon.data_dir().c_str(),
                daemon.log_path().c_str());
    status = daemon.WaitPoolReady(2, std::chrono::minutes(30));
  }
  // A case that fails is reported as such and the others still run; a daemon that does not start
  // ends its cases.
  std::vector<std::string> failures;
  auto failed = [&](const Status& s, const std::string& what) {
    failures.push_back(what + ": " + s.ToString());
    std::fprintf(stderr, "models_bench: %s\n", failures.back().c_str());
  };
  std::vector<CaseResult> results;
  Bench bench(o, &daemon, daemon.work_dir(), scale, h2d);
  if (!status.ok()) failed(status, "phosd");
  for (int size : o.sizes_mib) {
    if (!status.ok()) break;
    Result<CaseResult> r = bench.Llama(size);
    if (r.ok()) {
      results.push_back(std::move(*r));
    } else {
      failed(r.status(), fmt::format("llama {} MiB", size));
    }
  }
  for (int experts : o.experts) {
    if (!status.ok()) break;
    Result<CaseResult> r = bench.Moe(experts);
    if (r.ok()) {
      results.push_back(std::move(*r));
    } else {
      failed(r.status(), fmt::format("moe with {} experts", experts));
    }
  }
  if (main_cases) daemon.Stop();
  std::vector<BurstResult> bursts;
  uint64_t burst_snapshot_bytes = 0;
  if (most > 0) {
    // The bursts get a phosd of their own, as the cases below do: in the llama and moe cases'
    // daemon, the memory their 4 GiB models had used and left idle made the bursts' copies run
    // host-bound on this host (docs/decisions.md, "The bursts run in a phosd of their own"). The
    // pool holds a context per request of the largest burst.
    Daemon burst_daemon;
    status = burst_daemon.Start("models-bench-bursts",
                                {"--pool-min", std::to_string(most), "--pool-max", std::to_string(most + 4),
                                 "--keep-alive-ms", "1500", "--share-weights", "false", "--dram-mib",
                                 std::to_string(std::max<uint64_t>(4096, burst_mib))});
    if (status.ok()) status = burst_daemon.WaitPoolReady(2, std::chrono::minutes(30));
    if (!status.ok()) failed(status, "phosd for the bursts");
    Bench burst_bench(o, &burst_daemon, burst_daemon.work_dir(), scale, h2d);
    if (status.ok()) {
      Result<std::vector<BurstResult>> b = burst_bench.Bursts();
      if (b.ok()) {
        bursts = std::move(*b);
        burst_snapshot_bytes = burst_bench.burst_snapshot_bytes();
      } else {
        failed(b.status(), "simultaneous cold starts");
      }
    }
    burst_daemon.Stop();
    if (!o.keep_data) burst_daemon.RemoveDirectories();
  }
  std::optional<SecondInstanceResult> second;
  std::optional<FineTunesResult> finetunes;
  if (o.second_mib > 0 || o.finetunes > 0) {
    // Sharing on: a daemon of its own (the main one measures first instances, sharing off), with
    // room for every fine-tune (a function takes max_instances + 1 instance ranges). The pool holds
    // what runs at once, not a context per fine-tune: a deploy waits until the pool has a context
    // for each free range or is at its maximum, and each creation is 62 s of wall at scale 20.
    Daemon shared;
    status =
        shared.Start("models-bench-shared",
                     {"--pool-min", "4", "--pool-max", "8", "--instance-ranges",
                      std::to_string(2 * o.finetunes + 8), "--keep-alive-ms", "1500", "--dram-mib",
                      std::to_string(std::max(4096, 2 * std::max(o.finetune_base_mib, o.second_mib)))});
    if (status.ok()) status = shared.WaitPoolReady(2, std::chrono::minutes(30));
    if (!status.ok()) failed(status, "phosd sharing weights");
    Bench shared_bench(o, &shared, shared.work_dir(), scale, h2d);
    if (status.ok() && o.second_mib > 0) {
      Result<SecondInstanceResult> r = shared_bench.SecondInstance(o.second_mib);
      if (r.ok()) {
        second = std::move(*r);
      } else {
        failed(r.status(), "second instance");
      }
    }
    if (status.ok() && o.finetunes > 0) {
      Result<FineTunesResult> r = shared_bench.FineTunes();
      if (r.ok()) {
        finetunes = std::move(*r);
      } else {
        failed(r.status(), "fine-tunes");
      }
    }
    shared.Stop();
    if (!o.keep_data) shared.RemoveDirectories();
  }
  if (o.disk_mib > 0) {
    // Disk-cold restores: a daemon of their own without a DRAM tier, so every chunk comes from disk;
    // no sharing, so that each restore is a first instance.
    Daemon disk;
    status =
        disk.Start("models-bench-disk", {"--pool-min", "2", "--keep-alive-ms", "1500", "--dram-mib", "0",
                                         "--share-weights", "false"});
    if (status.ok()) status = disk.WaitPoolReady(2, std::chrono::minutes(30));
    if (!status.ok()) failed(status, "phosd without a DRAM tier");
    Bench disk_bench(o, &disk, disk.work_dir(), scale, h2d);
    if (status.ok()) {
      Result<CaseResult> r = disk_bench.DiskCold(o.disk_mib);
      if (r.ok()) {
        results.push_back(std::move(*r));
      } else {
        failed(r.status(), "disk-cold restores");
      }
    }
    disk.Stop();
    if (!o.keep_data) disk.RemoveDirectories();
  }
  const std::string profile = device->config.profile;
  std::string md = Markdown(results, profile, scale, h2d, o, phos::bench::CommandLine(argc, argv));
  if (!bursts.empty()) md += BurstMarkdown(bursts, burst_snapshot_bytes, o.concurrency_mib);
  if (second) md += SecondInstanceMarkdown(*second);
  if (finetunes) md += FineTunesMarkdown(*finetunes);
  if (!failures.empty()) {
    md += "\n### Cases that failed in this run\n\n";
    for (const std::string& f : failures) md += "- " + f + "\n";
  }
  std::printf("\n%s", md.c_str());
  if (!o.report.empty()) {
    phos::bench::WriteSection(o.report, "models-" + profile, md);
    const std::string plots = std::filesystem::path(o.report).parent_path() / "plots";
    if (Status s = WritePlotData(plots, profile, results, bursts); !s.ok()) {
      std::fprintf(stderr, "models_bench: %s\n", s.ToString().c_str());
    }
  }
  if (!o.keep_data) daemon.RemoveDirectories();
  bool met = true;
  for (const CaseResult& r : results) met = met && Met(r);
  met = met && failures.empty();
  met = met && (bursts.empty() || bursts.back().n < 16 || Median(bursts.back().utilisation) >= kBurstTarget);
  met = met && (!second || Met(*second));
  met = met && (!finetunes || Met(*finetunes));
  return met ? 0 : 1;
}
