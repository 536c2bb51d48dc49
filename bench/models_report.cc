// models_bench's report: the markdown tables of docs/benchmarks.md and the data of docs/plots.
#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models_bench.h"
#include "report.h"

namespace phos::bench::models {
namespace {

std::string Ms(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.1f}", v);
}

std::string Times(double v) {
  return std::isnan(v) ? "—" : fmt::format("{:.3f}", v);
}

// The median of a stage over the samples that went through it; NaN when none did.
double StageMedian(const ModeResult& m, double Sample::*field) {
  std::vector<double> v;
  for (double x : m.Values(field)) {
    if (!std::isnan(x)) v.push_back(x);
  }
  return Median(v);
}

// The median over phos's samples of first-launch − cpu-resume: how long after the function's CPU
// state resumed its first kernel reached phosd. NaN when no sample has both stages.
double FirstLaunchAfterResume(const CaseResult& r) {
  std::vector<double> v;
  for (const Sample& s : r.Find("phos")->samples) {
    if (!std::isnan(s.first_launch_ms) && !std::isnan(s.cpu_resume_ms)) v.push_back(s.first_launch_ms - s.cpu_resume_ms);
  }
  return Median(v);
}

}  // namespace

bool Met(const CaseResult& r) {
  const double vs_eager = r.Ratio("phos", "eager");
  return r.VsBound("phos") <= r.target_vs_bound &&
         (r.target_vs_eager >= 1.0 ? vs_eager < r.target_vs_eager : vs_eager <= r.target_vs_eager) &&
         !(FirstLaunchAfterResume(r) > kFirstLaunchAfterResumeMs);  // NaN (no stage headers): not judged
}

std::string Markdown(const std::vector<CaseResult>& results, const std::string& profile, double scale,
                     double h2d_bps, const Options& o, const std::string& command) {
  std::string md = fmt::format(
      "## Cold starts of real models ({})\n\n"
      "Command: `{}` (time scale {}; {}; host shared-memory huge pages: {})\n\n"
      "One phosd. Each llama is a random fp32 checkpoint (`scripts/make-checkpoint.py --size-mib N --dtype "
      "f32 "
      "--vocab 8192 --max-position-embeddings 64`) deployed with `--instances 1 --max-instances 2` and a "
      "sample "
      "request; each request is `{{\"tokens\": [1, 2, 3, 4], \"max_new_tokens\": {}, \"stream\": true}}`. "
      "First token = `X-Phos-Stage-First-Byte-Us` / time scale (modelled ms from the request's arrival; the "
      "first "
      "piece is the first token); full = the client's wall time of the whole exchange / time scale. Median "
      "and "
      "p99 (nearest rank: the maximum of fewer than 100) over the repetitions. Bound = max(B_read/W, E) + {} "
      "ms: "
      "B_read = the bytes of the buffers the request's calls name (for llama every buffer: weights, KV "
      "cache, "
      "scratch), W = {:.1f} GB/s (the profile's pinned host-to-device rate), E = warm first token. `loaded` "
      "= "
      "`X-Phos-Loaded-Bytes-At-First-Byte`; cpu-resume, first-launch and resident are the restore's stages "
      "(modelled ms from arrival), which say where the time went. Every answer equals the warm one's.\n",
      profile, command, scale, phos::bench::NowUtc(), phos::bench::HostShmemHugePages(), o.tokens, kBoundFloorMs,
      h2d_bps / 1e9);
  md += fmt::format(
      "\nPlots (`bench/coldstart` draws them from this run's tables): [first response by mode]"
      "(plots/first-response-{0}.svg), [latency against bytes read](plots/latency-vs-bytes-read-{0}.svg), "
      "[simultaneous cold starts](plots/concurrency-{0}.svg).\n",
      profile);
  for (const CaseResult& r : results) {
    md += fmt::format(
        "\n### {}\n\nsnapshot {:.1f} MiB; B_read {:.1f} MiB{}; B_read/W = {:.1f} ms; E = {:.1f} ms; bound = "
        "{:.1f} ms\n\n"
        "| mode | reps | first token median (ms) | p99 | / bound | / eager | full median (ms) | cpu-resume | "
        "first-launch | resident | loaded at first byte (MiB) | misses "
        "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        r.label, r.snapshot_bytes / 1048576.0, r.read_bytes / 1048576.0,
        r.read_note.empty() ? "" : " (" + r.read_note + ")", r.transfer_ms, r.compute_ms, r.bound_ms);
    for (const ModeResult& m : r.modes) {
      int64_t misses = -1;
      for (const Sample& s : m.samples) misses = std::max(misses, s.misses);
      const double loaded = Median(m.Values(&Sample::loaded_mib));
      md += fmt::format(
          "| {} | {} | {} | {} | {:.2f} | {:.2f} | {} | {} | {} | {} | {} | {} |\n", m.mode, m.samples.size(),
          Ms(m.FirstByte()), Ms(Percentile(m.Values(&Sample::first_byte_ms), 99)), r.VsBound(m.mode),
          r.Ratio(m.mode, "eager"), Ms(Median(m.Values(&Sample::full_ms))),
          Ms(StageMedian(m, &Sample::cpu_resume_ms)), Ms(StageMedian(m, &Sample::first_launch_ms)),
          Ms(StageMedian(m, &Sample::resident_ms)), loaded >= 0 ? fmt::format("{:.1f}", loaded) : "—",
          misses >= 0 ? std::to_string(misses) : "—");
    }
    md += fmt::format(
        "\nphos / bound = **{:.2f}** (target ≤ {}); phos / eager = **{:.2f}** (target {} {}); phos's first "
        "launch after resume = **{}** ms (target ≤ {}); phos / no-order = **{}**; phos / stop-the-world = "
        "**{}**; phos / cold-boot = **{}**: **{}**\n",
        r.VsBound("phos"), r.target_vs_bound, r.Ratio("phos", "eager"),
        r.target_vs_eager >= 1.0 ? "<" : "≤", r.target_vs_eager, Ms(FirstLaunchAfterResume(r)),
        kFirstLaunchAfterResumeMs, Times(r.Ratio("phos", "no-order")),
        Times(r.Ratio("phos", "stop-the-world")), Times(r.Ratio("phos", "cold-boot")),
        Met(r) ? "met" : "missed");
  }
  return md;
}

Status WritePlotData(const std::string& dir, const std::string& profile,
                     const std::vector<CaseResult>& results, const std::vector<BurstResult>& bursts) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal(fmt::format("create {}: {}", dir, ec.message()));
  auto open = [&](const std::string& what) {
    return std::ofstream(fmt::format("{}/models-{}-{}.tsv", dir, profile, what));
  };
  std::ofstream modes = open("modes"), read = open("read"), burst = open("bursts");
  // modes: one row per case, the median first byte of each mode but warm, then the bound.
  modes << "case";
  for (const char* mode : kModes) {
    if (std::string(mode) != "warm") modes << "\t" << mode;
  }
  modes << "\tbound\n";
  read << "case\tread_mib\tphos_ms\teager_ms\tbound_ms\n";
  for (const CaseResult& r : results) {
    modes << "\"" << r.label << "\"";
    for (const char* mode : kModes) {
      if (std::string(mode) == "warm") continue;
      const ModeResult* m = r.Find(mode);
      modes << (m == nullptr ? std::string("\tNaN") : fmt::format("\t{:.2f}", m->FirstByte()));
    }
    modes << fmt::format("\t{:.2f}\n", r.bound_ms);
    read << fmt::format("\"{}\"\t{:.1f}\t{:.2f}\t{:.2f}\t{:.2f}\n", r.label, r.read_bytes / 1048576.0,
                        r.Find("phos")->FirstByte(), r.Find("eager")->FirstByte(), r.bound_ms);
  }
  burst << "at_once\tfirst_byte_median_ms\tfirst_byte_p99_ms\tlink_utilisation\n";
  for (const BurstResult& b : bursts) {
    burst << fmt::format("{}\t{:.2f}\t{:.2f}\t{:.3f}\n", b.n, Median(b.first_byte_ms),
                         Percentile(b.first_byte_ms, 99), Median(b.utilisation));
  }
  if (!modes || !read || !burst) return Status::Internal("cannot write the plot data in " + dir);
  return Status::Ok();
}

std::string BurstMarkdown(const std::vector<BurstResult>& bursts, uint64_t snapshot_bytes, int mib) {
  std::string md = fmt::format(
      "\n### Simultaneous cold starts of different functions (one device)\n\n"
      "N llama functions of {} MiB (snapshot {:.1f} MiB each, own seeds) in a phosd of their own, scaled to "
      "zero; N requests sent at "
      "once, one per function, each restored in phos mode. Link = N x snapshot bytes / (the last request's "
      "resident stage) / W, median over the repetitions; p99 of first byte over every request. Where the "
      "time went (medians over the repetitions, modelled ms from the requests' arrival): the earliest and "
      "the last context lease, the last CPU resume, the last resident stage, and what the bytes take at W "
      "alone; *host-bound*: the share of the device's host-to-device copies, and of its compute operations "
      "(kernels, memsets), whose work on this host took longer than the model gives them (simgpu's count, "
      "`phos_simgpu_host_bound_ops_total`): time the host decided rather than the modelled device. Each size "
      "first runs one burst untimed, each function's first restore at that size: its snapshot's host pages "
      "have sat untouched since the deploys or the last size, and this host makes such memory several times "
      "slower to read (see \"Host memory left idle\" below); its link share and host-bound copies are in the "
      "last column, apart from the repetitions.\n\n"
      "| at once | requests | first byte median (ms) | p99 (ms) | link utilisation | leases (first–last) "
      "| last cpu-resume | last resident | bytes at W | host-bound copies / compute | untimed first burst: link "
      "(host-bound copies) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n",
      mib, snapshot_bytes / 1048576.0);
  for (const BurstResult& b : bursts) {
    md += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.0f}% | {:.2f}–{:.2f} | {:.2f} | {:.2f} | {:.2f} | {} | {} |\n", b.n,
                      b.first_byte_ms.size(), Median(b.first_byte_ms), Percentile(b.first_byte_ms, 99),
                      100 * Median(b.utilisation), Median(b.first_lease_ms), Median(b.last_lease_ms),
                      Median(b.last_cpu_resume_ms), Median(b.last_resident_ms), Median(b.link_ms),
                      b.h2d_host_bound.empty()
                          ? "—"
                          : fmt::format("{:.0f}% / {:.0f}%", 100 * Median(b.h2d_host_bound),
                                        100 * Median(b.compute_host_bound)),
                      b.untimed_h2d_host_bound
                          ? fmt::format("{:.0f}% ({:.0f}%)", 100 * b.untimed_utilisation, 100 * *b.untimed_h2d_host_bound)
                          : fmt::format("{:.0f}%", 100 * b.untimed_utilisation));
  }
  const BurstResult& most = bursts.back();
  md += fmt::format("\n{} at once: link utilisation **{:.0f}%** (target ≥ {:.0f}%): **{}**\n", most.n,
                    100 * Median(most.utilisation), 100 * kBurstTarget,
                    Median(most.utilisation) >= kBurstTarget ? "met" : "missed");
  return md;
}

bool Met(const SecondInstanceResult& r) {
  return Median(r.added_mib) * 1048576.0 <= kSecondAddedTarget * r.weight_bytes &&
         Median(r.second_ms) / Median(r.first_ms) <= kSecondLatencyTarget;
}

std::string SecondInstanceMarkdown(const SecondInstanceResult& r) {
  const double added = Median(r.added_mib), weights = r.weight_bytes / 1048576.0;
  const double ratio = Median(r.second_ms) / Median(r.first_ms);
  // Where the time went: medians of the stages (times from arrival) and waits (durations).
  std::string stages =
      "\nWhere each instance's time went (medians, modelled ms; range-wait and pool-wait are durations, the "
      "others times from the request's arrival):\n\n| instance |";
  for (const char* stage : kSecondStages) stages += fmt::format(" {} |", stage);
  stages += "\n|---|";
  for (size_t i = 0; i < std::size(kSecondStages); ++i) stages += "---|";
  for (int i = 0; i < 2; ++i) {
    stages += i == 0 ? "\n| first |" : "\n| second |";
    for (const char* stage : kSecondStages) {
      auto it = r.stage_ms[i].find(stage);
      stages += it == r.stage_ms[i].end() || it->second.empty() ? " – |" : fmt::format(" {:.2f} |", Median(it->second));
    }
  }
  stages += "\n";
  return fmt::format(
      "\n### A second instance while the first runs (read-only weights shared on the device)\n\n"
      "llama {} MiB (snapshot {:.1f} MiB, weights {:.1f} MiB) in a daemon that shares read-only buffers; "
      "scaled to "
      "zero, then per repetition a phos restore (the first instance) and at once a second one. The second "
      "maps the "
      "first's weights (`X-Phos-Shared-Bytes`); what it adds to device memory = snapshot − shared bytes. "
      "*warm*: a request right after, answered by one of the two running instances: the function's own "
      "compute, the floor of the second instance's first byte. simgpu runs kernels at this host's CPU speed "
      "over the time scale, so *warm* and what the second spends computing are this host's, not the modelled "
      "device's.\n\n"
      "| reps | first instance first byte (ms) | second (ms) | warm (ms) | second / first | warm / first | shared "
      "(MiB) | added (MiB) | added / weights |\n|---|---|---|---|---|---|---|---|---|\n"
      "| {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.1f}% |\n\n"
      "second / first = **{:.2f}** (target ≤ {}); added / weights = **{:.1f}%** (target ≤ {:.0f}%): **{}**\n",
      r.size_mib, r.snapshot_bytes / 1048576.0, weights, r.first_ms.size(), Median(r.first_ms),
      Median(r.second_ms), Median(r.warm_ms), ratio, Median(r.warm_ms) / Median(r.first_ms), Median(r.shared_mib),
      added, 100 * added / weights, ratio, kSecondLatencyTarget, 100 * added / weights, 100 * kSecondAddedTarget,
      Met(r) ? "met" : "missed") +
         stages;
}

bool Met(const FineTunesResult& r) {
  const double ideal = static_cast<double>(r.base_bytes) + r.n * static_cast<double>(r.adapter_bytes);
  // Held once: every fine-tune after the first maps at least 90% of the base's bytes.
  bool once = true;
  for (size_t i = 1; i < r.shared_mib.size(); ++i)
    once = once && r.shared_mib[i] * 1048576.0 >= 0.9 * r.base_bytes;
  return r.store_unique <= kFineTuneStoreTarget * ideal && r.dram_pinned <= kFineTuneStoreTarget * ideal &&
         once;
}

std::string FineTunesMarkdown(const FineTunesResult& r) {
  const double mib = 1048576.0;
  const double ideal = (static_cast<double>(r.base_bytes) + r.n * static_cast<double>(r.adapter_bytes)) / mib;
  std::string md = fmt::format(
      "\n### {} fine-tunes of one {} MiB base (LoRA adapters, rank 8, on q and v)\n\n"
      "One base checkpoint (weights {:.1f} MiB) and {} adapters ({:.3f} MiB each) deployed as {} functions "
      "in the "
      "daemon that shares read-only weights; base + adapters = {:.1f} MiB. The store's and DRAM tier's bytes "
      "are "
      "their `/metrics` gauges after every deploy (each snapshot also holds the function's KV cache, scratch "
      "and "
      "module). Then {} of them run at once: one restored first, the others while it runs.\n\n"
      "| store unique (MiB) | / (base + adapters) | snapshots name (MiB) | DRAM tier pinned (MiB) | / (base "
      "+ adapters) "
      "|\n|---|---|---|---|---|\n| {:.1f} | {:.2f} | {:.1f} | {:.1f} | {:.2f} |\n\n"
      "| fine-tune running | shared from the base (MiB) | copied to the device (MiB) |\n|---|---|---|\n",
      r.n, r.base_mib, r.base_bytes / mib, r.n, r.adapter_bytes / mib, r.n, ideal, r.running,
      r.store_unique / mib, r.store_unique / mib / ideal, r.store_logical / mib, r.dram_pinned / mib,
      r.dram_pinned / mib / ideal);
  double held = 0;
  for (size_t i = 0; i < r.shared_mib.size(); ++i) {
    md += fmt::format("| {} | {:.1f} | {:.1f} |\n", i, r.shared_mib[i], r.added_mib[i]);
    held += r.added_mib[i];
  }
  md += fmt::format(
      "\nThe {} running hold {:.1f} MiB on the device, {:.2f}x the base; store / (base + adapters) = "
      "**{:.2f}**, DRAM "
      "tier = **{:.2f}** (target ≤ {}): **{}**\n",
      r.running, held, held * mib / r.base_bytes, r.store_unique / mib / ideal, r.dram_pinned / mib / ideal,
      kFineTuneStoreTarget, Met(r) ? "met" : "missed");
  return md;
}

}  // namespace phos::bench::models
