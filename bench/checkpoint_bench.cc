// The stall a checkpoint of a running instance costs it (docs/design.md D10), by mode and size:
// mlp of each size is deployed with one instance, which serves warm requests back to back while a
// checkpoint of it is taken. For every checkpoint the report gives the time the instance served
// nothing for it (phosd's `stall_us`), the worst first-byte latency of the requests that overlapped
// the checkpoint minus the median without one (the stall its callers saw), and the checkpoint's
// whole duration. Target (issue 14): the soft modes' seen stall at most 10% of stop-the-world's at
// 1 GiB and more. Times are modelled (wall / time scale), as in the other benchmarks.
//
// Then live migration (two simulated devices): the instance moved to the other device
// `--migrations` times while requests run back to back; its downtime (phosd's: the final stop to
// the instance ready on the target) against the bound of moving the bytes written since their
// copy (recopied at the final stop) from the source device to host memory and on to the target,
// at the profile's pinned bandwidths, plus the bound's fixed floor (docs/design.md, "The bound":
// what any restore pays, here the process's end and its CPU side's resume on the target). Target:
// at most 1.1x the bound.
//
// Then training throughput: the train function deployed as a job of `--train-steps` steps, once
// with no checkpoint and once per `--train-every` K with a soft copy-on-write checkpoint every K
// steps; the steps per second between step 10 and its last. The runs go in `--train-rounds`
// rounds, each a run without checkpoints then one per K, and a last run without after the rounds:
// each K's run is compared with the runs without on either side of it, and the ratio reported is
// the median over the rounds (on a 2-core host, runs of the same job minutes apart differ by a
// few percent, as much as the target's margin). Target: with checkpoints, at least 95% of the
// throughput without.
//
//   checkpoint_bench [--sizes 256,1024,4096] [--repetitions 3] [--baseline 10] [--migrations 3]
//                    [--train-steps 200] [--train-every 10,50] [--train-rounds 3]
//                    [--report PATH | --no-report]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "phosd_harness.h"
#include "report.h"

namespace phos::bench {
namespace {

constexpr int kLayers = 4;
constexpr const char* kModes[] = {"stop-the-world", "soft-cow", "soft-recopy"};

struct Options {
  std::vector<int> sizes_mib{256, 1024, 4096};
  int repetitions = 3;
  int baseline = 10;
  int migrations = 3;
  int train_steps = 200;
  std::vector<int> train_every{10, 50};
  int train_rounds = 3;
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
};

struct ModeResult {
  std::string mode;
  std::vector<double> stall_ms;     // phosd's: the instance served nothing
  std::vector<double> seen_ms;      // worst overlapping request's first byte minus the baseline
  std::vector<double> total_ms;     // the checkpoint, start to committed
  std::vector<double> requests;     // requests served during each checkpoint
};

// The train job's model.
constexpr int kTrainInputs = 512, kTrainHidden = 2048, kTrainOutputs = 64, kTrainBatch = 32;
const std::vector<std::string> kTrainArgs = {"--inputs",  std::to_string(kTrainInputs),  "--hidden",
                                             std::to_string(kTrainHidden), "--outputs", std::to_string(kTrainOutputs),
                                             "--batch",   std::to_string(kTrainBatch)};
// Its parameters; with gradients and Adam's two moments, four times as many floats on the device.
constexpr int64_t kTrainParameters =
    int64_t{kTrainHidden} * kTrainInputs + kTrainHidden + int64_t{kTrainOutputs} * kTrainHidden + kTrainOutputs;
constexpr int kNoCheckpoint = 1000000;  // checkpoint_every beyond the job's steps: none taken

struct TrainingResult {
  int every = 0;  // kNoCheckpoint: none
  double steps_per_s = 0;
  int checkpoints = 0;  // kept at the end (at most the job's keep)
};

// One K's runs against the runs without checkpoints around them.
struct TrainingRatio {
  int every = 0;
  std::vector<double> steps_per_s;  // a run per round
  std::vector<double> of_without;   // each run over the mean of the runs without before and after its round
};

// `runs` in the order they ran: rounds of a run without checkpoints then one per K, and a last run
// without. A K's run in a round is compared with the mean of that round's run without and the next.
std::vector<TrainingRatio> TrainingRatios(const std::vector<TrainingResult>& runs) {
  std::vector<TrainingRatio> ratios;
  std::vector<size_t> nones;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].every == kNoCheckpoint) nones.push_back(i);
  }
  for (size_t r = 0; r + 1 < nones.size(); ++r) {
    const double none = (runs[nones[r]].steps_per_s + runs[nones[r + 1]].steps_per_s) / 2;
    for (size_t i = nones[r] + 1; i < nones[r + 1]; ++i) {
      auto it = std::find_if(ratios.begin(), ratios.end(), [&](const TrainingRatio& t) { return t.every == runs[i].every; });
      if (it == ratios.end()) it = ratios.insert(ratios.end(), TrainingRatio{.every = runs[i].every});
      it->steps_per_s.push_back(runs[i].steps_per_s);
      it->of_without.push_back(runs[i].steps_per_s / none);
    }
  }
  return ratios;
}

// Moves of the instance between the devices, modelled ms.
struct MigrationResult {
  std::vector<double> downtime_ms;  // phosd's: the final stop to the instance ready on the target
  std::vector<double> committing_ms, releasing_ms, restoring_ms;  // its parts
  std::vector<double> seen_ms;      // worst overlapping request's first byte minus the baseline
  std::vector<double> moved_ms;     // the recopied bytes through host memory, at pinned bandwidth
  std::vector<double> recopied_mib;
};

struct SizeResult {
  int size_mib = 0;
  double baseline_ms = 0;  // median first byte of a warm request without a checkpoint
  std::vector<ModeResult> modes;
  MigrationResult migration;
};

class CheckpointBench {
 public:
  CheckpointBench(const Options& o, Daemon* d, double scale, const PhosSimProfileInfo& profile)
      : o_(o), d_(d), scale_(scale), profile_(profile) {}

  Result<SizeResult> Measure(int size_mib) {
    SizeResult r;
    r.size_mib = size_mib;
    const std::string name = fmt::format("mlp-{}", size_mib);
    std::printf("\n== mlp %d MiB\n", size_mib);
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(PhosFn({"deploy", name, PHOS_MLP_FUNCTION, "--instances", "1", "--sample", "{\"seed\": 1}",
                                 "--", "--size-mib", std::to_string(size_mib), "--layers", std::to_string(kLayers)})
                             .status()
                             .WithContext("deploy " + name));
    PHOS_RETURN_IF_ERROR(d_->WaitSettled(name, std::chrono::minutes(10)));
    std::vector<double> quiet;
    for (int i = 0; i < o_.baseline; ++i) {
      PHOS_ASSIGN_OR_RETURN(double ms, WarmFirstByte(name, i));
      quiet.push_back(ms);
    }
    r.baseline_ms = Median(quiet);
    std::printf("warm first byte without a checkpoint: %.3f ms (median of %d)\n", r.baseline_ms, o_.baseline);
    for (const char* mode : kModes) {
      ModeResult m;
      m.mode = mode;
      for (int rep = 0; rep < o_.repetitions; ++rep) PHOS_RETURN_IF_ERROR(Once(name, r.baseline_ms, &m));
      std::printf("%-15s stall %.3f ms, seen %.3f ms, checkpoint %.3f ms (medians of %d)\n", mode, Median(m.stall_ms),
                  Median(m.seen_ms), Median(m.total_ms), o_.repetitions);
      std::fflush(stdout);
      r.modes.push_back(std::move(m));
    }
    for (int i = 0; i < o_.migrations; ++i) {
      PHOS_RETURN_IF_ERROR(Move(name, (i + 1) % 2, r.baseline_ms, &r.migration));
    }
    if (o_.migrations > 0) {
      const MigrationResult& m = r.migration;
      std::printf("migration       downtime %.3f ms (committing %.3f, releasing %.3f, restoring %.3f), seen %.3f ms, "
                  "bound %.3f ms for %.2f MiB (medians of %d)\n",
                  Median(m.downtime_ms), Median(m.committing_ms), Median(m.releasing_ms), Median(m.restoring_ms),
                  Median(m.seen_ms), BoundMs(Median(m.moved_ms), 0), Median(m.recopied_mib), o_.migrations);
      std::fflush(stdout);
    }
    PHOS_RETURN_IF_ERROR(PhosFn({"rm", name}).status().WithContext("remove " + name));
    return r;
  }

 private:
  Result<std::string> PhosFn(std::vector<std::string> args) {
    std::vector<std::string> argv = {PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "--token-file",
                                     d_->data_dir() + "/admin.token"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv);
  }

  // One warm request's first byte, modelled ms, from phosd's stage header.
  Result<double> WarmFirstByte(const std::string& name, int seed) {
    PHOS_ASSIGN_OR_RETURN(HttpResponse r, Http(d_->endpoint() + "/v1/functions/" + name + "/invoke",
                                               fmt::format("{{\"seed\": {}}}", seed), {"X-Phos-Restore-Mode: warm"}));
    if (r.status != 200) return Status::Unavailable(fmt::format("warm request: HTTP {}: {}", r.status, r.body));
    std::optional<double> ms = StageMs(r, "first-byte", scale_);
    if (!ms) return Status::Internal("warm request without X-Phos-Stage-First-Byte-Us");
    return *ms;
  }

  // POSTs `body` to the function's `action` (checkpoint, migrate) while warm requests run back to
  // back: the answer, and the first bytes (modelled ms) of the requests that overlapped it.
  Result<HttpResponse> WhileServing(const std::string& name, const std::string& action, const std::string& body,
                                    std::vector<double>* during) {
    std::atomic<bool> done{false};
    Result<HttpResponse> answer = Status::Unavailable("no answer");
    // The requests start first: the action is taken between two of them.
    Status serving;
    std::thread requests([&] {
      for (int seed = 100; !done.load(); ++seed) {
        Result<double> ms = WarmFirstByte(name, seed);
        if (!ms.ok()) {
          serving = ms.status();
          return;
        }
        during->push_back(*ms);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a request under way (not an assertion)
    answer = Http(d_->endpoint() + "/v1/functions/" + name + "/" + action, body, {"Content-Type: application/json"});
    // One more request after the answer: a stall that ends with it ends in that request.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done = true;
    requests.join();
    PHOS_RETURN_IF_ERROR(serving.WithContext("warm requests during a " + action));
    if (during->empty()) return Status::Internal("no request was served during the " + action);
    return answer;
  }

  // One checkpoint in `m.mode` while warm requests run back to back.
  Status Once(const std::string& name, double baseline_ms, ModeResult* m) {
    std::vector<double> during;
    PHOS_ASSIGN_OR_RETURN(HttpResponse answer,
                          WhileServing(name, "checkpoint", nlohmann::json{{"mode", m->mode}}.dump(), &during));
    if (answer.status != 201) {
      return Status::Unavailable(fmt::format("checkpoint ({}): HTTP {}: {}", m->mode, answer.status, answer.body));
    }
    nlohmann::json j = nlohmann::json::parse(answer.body, nullptr, false);
    if (j.is_discarded() || !j.contains("stall_us") || !j.contains("total_us")) {
      return Status::Internal("checkpoint answer without stall_us and total_us: " + answer.body);
    }
    m->stall_ms.push_back(j["stall_us"].get<double>() / 1000.0 / scale_);
    m->total_ms.push_back(j["total_us"].get<double>() / 1000.0 / scale_);
    m->seen_ms.push_back(std::max(0.0, *std::max_element(during.begin(), during.end()) - baseline_ms));
    m->requests.push_back(static_cast<double>(during.size()));
    return Status::Ok();
  }

  // One move of the instance to device `to` while warm requests run back to back.
  Status Move(const std::string& name, int to, double baseline_ms, MigrationResult* m) {
    std::vector<double> during;
    PHOS_ASSIGN_OR_RETURN(HttpResponse answer, WhileServing(name, "migrate", nlohmann::json{{"device", to}}.dump(), &during));
    if (answer.status != 200) {
      return Status::Unavailable(fmt::format("migration to device {}: HTTP {}: {}", to, answer.status, answer.body));
    }
    nlohmann::json j = nlohmann::json::parse(answer.body, nullptr, false);
    if (j.is_discarded() || !j.contains("downtime_us") || !j.contains("recopied_bytes")) {
      return Status::Internal("migration answer without downtime_us and recopied_bytes: " + answer.body);
    }
    auto ms = [&](const char* field) { return j.value(field, 0.0) / 1000.0 / scale_; };
    const double bytes = j["recopied_bytes"].get<double>();
    m->downtime_ms.push_back(ms("downtime_us"));
    m->committing_ms.push_back(ms("committing_us"));
    m->releasing_ms.push_back(ms("releasing_us"));
    m->restoring_ms.push_back(ms("restoring_us"));
    m->seen_ms.push_back(std::max(0.0, *std::max_element(during.begin(), during.end()) - baseline_ms));
    m->moved_ms.push_back(1000.0 * (bytes / profile_.d2h_pinned_bps + bytes / profile_.h2d_pinned_bps));
    m->recopied_mib.push_back(bytes / (1 << 20));
    return Status::Ok();
  }


 public:
  // The train job with a checkpoint every `every` steps: its steps per second, modelled, from
  // step 10 to its last.
  Result<TrainingResult> Train(int every) {
    const std::string name = every == kNoCheckpoint ? "train-none" : fmt::format("train-{}", every);
    std::vector<std::string> deploy = {"deploy", name, PHOS_TRAIN_FUNCTION, "--job", "--checkpoint-every",
                                       std::to_string(every), "--keep-checkpoints", "2", "--steps",
                                       std::to_string(o_.train_steps), "--"};
    deploy.insert(deploy.end(), kTrainArgs.begin(), kTrainArgs.end());
    PHOS_RETURN_IF_ERROR(PhosFn(deploy).status().WithContext("deploy " + name));
    using Clock = std::chrono::steady_clock;
    Clock::time_point from{};
    int64_t from_step = 0;
    const Clock::time_point limit = Clock::now() + std::chrono::minutes(30);
    nlohmann::json j;
    while (true) {
      PHOS_ASSIGN_OR_RETURN(HttpResponse r, Http(d_->endpoint() + "/v1/functions/" + name + "/job", std::nullopt));
      j = nlohmann::json::parse(r.body, nullptr, false);
      if (r.status != 200 || !j.is_object()) return Status::Unavailable("job status: " + r.body);
      const int64_t step = j.value("step", int64_t{0});
      if (from == Clock::time_point{} && step >= 10) {
        from = Clock::now();
        from_step = step;
      }
      if (j.value("finished", false)) break;
      if (Clock::now() > limit) return Status::Timeout(name + " did not finish in 30 minutes");
      // A run lasts tens of seconds: 20 ms between looks, at each end of it, is under 0.2% of it, and polling faster
      // took a few percent of the host's two cores from the job it measures.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double wall_s = std::chrono::duration<double>(Clock::now() - from).count();
    TrainingResult t;
    t.every = every;
    t.steps_per_s = static_cast<double>(o_.train_steps - from_step) / (wall_s / scale_);
    t.checkpoints = static_cast<int>(j["checkpoints"].size());
    std::printf("%-12s %.1f steps/s (modelled), %d checkpoints kept\n", name.c_str(), t.steps_per_s, t.checkpoints);
    std::fflush(stdout);
    PHOS_RETURN_IF_ERROR(PhosFn({"rm", name}).status().WithContext("remove " + name));
    return t;
  }

 private:
  const Options& o_;
  Daemon* d_;
  double scale_;
  PhosSimProfileInfo profile_;
};

std::string Markdown(const std::vector<SizeResult>& results, const std::vector<TrainingResult>& training,
                     int train_steps, const std::string& command, const PhosSimConfig& config) {
  std::string md = fmt::format(
      "### Checkpoints of a running instance: the stall it sees ({} profile, time scale {:g})\n\n"
      "`{}` — {}; host shared-memory huge pages: {}. mlp ({} layers) of each size with one warm instance serving requests back to back while a "
      "checkpoint of it is taken; medians over the repetitions, modelled ms (wall / time scale). *stall*: the time "
      "the instance served nothing for the checkpoint (phosd's `stall_us`); *seen*: the worst first byte of the "
      "requests that overlapped the checkpoint minus the median without one, the stall its callers saw; "
      "*checkpoint*: start to committed. Target: the soft modes' seen stall at most 10% of stop-the-world's at "
      "1 GiB and more.\n\n"
      "| size | mode | stall (ms) | seen (ms) | checkpoint (ms) | requests during | seen / stop-the-world's | target |\n"
      "|---:|---|---:|---:|---:|---:|---:|---|\n",
      config.profile, config.time_scale, command, NowUtc(), HostShmemHugePages(), kLayers);
  for (const SizeResult& r : results) {
    const double stw = r.modes.empty() ? 0 : Median(r.modes[0].seen_ms);
    for (const ModeResult& m : r.modes) {
      const bool soft = m.mode != "stop-the-world";
      const double ratio = stw > 0 ? Median(m.seen_ms) / stw : 0;
      std::string target = !soft || r.size_mib < 1024 ? "" : ratio <= 0.10 ? "met" : fmt::format("**missed** ({:.2f})", ratio);
      md += fmt::format("| {} MiB | {} | {:.3f} | {:.3f} | {:.3f} | {:.0f} | {} | {} |\n", r.size_mib, m.mode,
                        Median(m.stall_ms), Median(m.seen_ms), Median(m.total_ms), Median(m.requests),
                        soft ? fmt::format("{:.3f}", ratio) : "", target);
    }
  }
  if (!results.empty() && !results[0].migration.downtime_ms.empty()) {
    md += fmt::format(
        "\nLive migration: the same instance moved to the other device {} times while requests ran back to back "
        "(medians). *downtime*: phosd's, from the final stop to the instance ready on the target, in parts: "
        "*committing* (the CPU state kept, the buffers written since their copy copied again, the version "
        "committed), *releasing* (the process ended, its session's memory released on the source), *restoring* (the "
        "process forked from the new template, its session restored on the target); *seen*: as above; *moved*: "
        "the recopied bytes moved from the source device to host memory and on to the target at the profile's "
        "pinned bandwidths; *bound*: moved + the bound's fixed floor of {} ms (docs/design.md, \"The bound\": "
        "what every restore pays besides its bytes, here the source process's end and the CPU side's resume on "
        "the target). Target: downtime at most 1.1x the bound.\n\n"
        "| size | downtime (ms) | committing | releasing | restoring | seen (ms) | recopied (MiB) | moved (ms) | "
        "bound (ms) | downtime / bound | target |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        results[0].migration.downtime_ms.size(), kBoundFloorMs);
    for (const SizeResult& r : results) {
      const MigrationResult& m = r.migration;
      const double moved = Median(m.moved_ms);
      const double bound = BoundMs(moved, 0);
      const double ratio = Median(m.downtime_ms) / bound;
      md += fmt::format("| {} MiB | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.4f} | {:.3f} | {:.2f} | {} |\n",
                        r.size_mib, Median(m.downtime_ms), Median(m.committing_ms), Median(m.releasing_ms),
                        Median(m.restoring_ms), Median(m.seen_ms), Median(m.recopied_mib), moved, bound, ratio,
                        ratio <= 1.1 ? "met" : fmt::format("**missed** ({:.2f}x)", ratio));
    }
  }
  md += "\nWarm first byte without a checkpoint: ";
  for (size_t i = 0; i < results.size(); ++i) {
    md += fmt::format("{}{} MiB {:.3f} ms", i == 0 ? "" : ", ", results[i].size_mib, results[i].baseline_ms);
  }
  md += fmt::format(
      ".\n\n![seen stall by mode and size](plots/checkpoint-{0}.svg) (`gnuplot -e \"profile='{0}'\" "
      "bench/checkpoint.gp`, from `plots/checkpoint-{0}.tsv`)\n",
      config.profile);
  if (!training.empty()) {
    md += fmt::format(
        "\nTraining throughput: the train function (`{}`: {:.2f} M parameters, {:.0f} MiB with gradients and "
        "Adam's moments) as a job of {} steps, soft copy-on-write checkpoints every K steps; steps per second from "
        "step 10 to its last, modelled. The runs go in rounds, each a run without checkpoints then one per K, and a "
        "last run without after them; each K's run is compared with the mean of the runs without on either side of "
        "it. Target: at least 95% of the throughput without checkpoints, in the median round.\n\n"
        "| checkpoint every | steps/s, by round | of without, by round | median | target |\n|---|---|---|---:|---|\n",
        fmt::join(kTrainArgs, " "), kTrainParameters / 1e6, kTrainParameters * 4.0 * sizeof(float) / (1 << 20),
        train_steps);
    std::vector<double> none;
    for (const TrainingResult& t : training) {
      if (t.every == kNoCheckpoint) none.push_back(t.steps_per_s);
    }
    md += fmt::format("| never | {:.1f} | | | |\n", fmt::join(none, ", "));
    for (const TrainingRatio& t : TrainingRatios(training)) {
      const double ratio = Median(t.of_without);
      md += fmt::format("| {} steps | {:.1f} | {:.3f} | {:.3f} | {} |\n", t.every, fmt::join(t.steps_per_s, ", "),
                        fmt::join(t.of_without, ", "), ratio,
                        ratio >= 0.95 ? "met" : fmt::format("**missed** ({:.2f})", ratio));
    }
  }
  return md;
}

// The plot's table (docs/plots/checkpoint-<profile>.tsv): per size, each mode's median seen and
// phosd stall, modelled ms.
bool WritePlotTable(const std::vector<SizeResult>& results, const std::string& path) {
  std::ofstream out(path);
  out << "size";
  for (const char* column : {"seen", "stall"}) {
    for (const char* mode : kModes) out << fmt::format("\t{} ({})", mode, column);
  }
  out << "\n";
  for (const SizeResult& r : results) {
    if (r.modes.size() != std::size(kModes)) continue;
    out << fmt::format("{} MiB", r.size_mib);
    for (const ModeResult& m : r.modes) out << fmt::format("\t{:.3f}", Median(m.seen_ms));
    for (const ModeResult& m : r.modes) out << fmt::format("\t{:.3f}", Median(m.stall_ms));
    out << "\n";
  }
  if (!out) std::fprintf(stderr, "checkpoint_bench: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app{"checkpoint_bench: the stall checkpoints of a running instance cost it"};
  std::string sizes = "256,1024,4096";
  app.add_option("--sizes", sizes, "mlp sizes in MiB, comma-separated");
  app.add_option("--repetitions", o.repetitions, "Checkpoints per mode and size")->check(CLI::Range(1, 100));
  app.add_option("--baseline", o.baseline, "Warm requests measured without a checkpoint")->check(CLI::Range(1, 1000));
  app.add_option("--migrations", o.migrations, "Moves of each size's instance between the two devices (0: none)")
      ->check(CLI::Range(0, 100));
  app.add_option("--train-steps", o.train_steps, "Steps of each training job (0: no training)")
      ->check(CLI::Range(0, 100000));
  std::string every = "10,50";
  app.add_option("--train-every", every, "Checkpoint intervals of the training jobs, comma-separated");
  app.add_option("--train-rounds", o.train_rounds, "Rounds of training runs (a run without checkpoints, then one per K)")
      ->check(CLI::Range(1, 20));
  app.add_option("--report", o.report, "The file whose section this run replaces");
  bool no_report = false;
  app.add_flag("--no-report", no_report, "Print only");
  CLI11_PARSE(app, argc, argv);
  if (no_report) o.report.clear();
  Result<std::vector<int>> parsed = ParsePositiveList("--sizes", sizes);
  if (!parsed.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", parsed.status().message().c_str());
    return 2;
  }
  o.sizes_mib = *parsed;
  Result<std::vector<int>> intervals = ParsePositiveList("--train-every", every);
  if (!intervals.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", intervals.status().message().c_str());
    return 2;
  }
  o.train_every = *intervals;
  Result<SimDevice> device = OpenSimDevice();
  if (!device.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", device.status().message().c_str());
    return 1;
  }
  WarnIfNoShmemHugePages("checkpoint_bench");
  const int largest = *std::max_element(o.sizes_mib.begin(), o.sizes_mib.end());
  // The instance, its spare range and a capture's pinned host copies, with room to spare; and a
  // second device to move it to.
  setenv("PHOS_SIMGPU_PREFAULT", fmt::format("{}M", largest * 3).c_str(), /*overwrite=*/0);
  setenv("PHOS_SIMGPU_DEVICES", "2", /*overwrite=*/0);
  Daemon daemon;
  Status status = daemon.Start("checkpoint-bench", {});
  std::vector<SizeResult> results;
  CheckpointBench bench(o, &daemon, device->config.time_scale, device->profile);
  for (int size : o.sizes_mib) {
    if (!status.ok()) break;
    Result<SizeResult> r = bench.Measure(size);
    if (r.ok()) {
      results.push_back(std::move(*r));
    } else {
      status = r.status().WithContext(fmt::format("mlp {} MiB", size));
    }
  }
  std::vector<TrainingResult> training;
  if (status.ok() && o.train_steps > 0) std::printf("\n== training\n");
  // Rounds of a run without checkpoints then one per K, and a last run without: each K's run has
  // one without on either side (TrainingRatios).
  std::vector<int> runs;
  for (int round = 0; round < o.train_rounds; ++round) {
    runs.push_back(kNoCheckpoint);
    runs.insert(runs.end(), o.train_every.begin(), o.train_every.end());
  }
  runs.push_back(kNoCheckpoint);
  for (int k : runs) {
    if (!status.ok() || o.train_steps == 0) break;
    Result<TrainingResult> t = bench.Train(k);
    if (t.ok()) {
      training.push_back(*t);
    } else {
      status = t.status().WithContext("training");
    }
  }
  daemon.Stop();
  if (!status.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s (phosd log: %s)\n", status.ToString().c_str(), daemon.log_path().c_str());
    return 1;
  }
  std::string md = Markdown(results, training, o.train_steps, CommandLine(argc, argv), device->config);
  std::printf("\n%s", md.c_str());
  if (!o.report.empty()) {
    WriteSection(o.report, std::string("checkpoint-") + device->config.profile, md);
    const std::string plots = std::filesystem::path(o.report).parent_path() / "plots";
    WritePlotTable(results, fmt::format("{}/checkpoint-{}.tsv", plots, device->config.profile));
  }
  daemon.RemoveDirectories();
  return 0;
}

}  // namespace
}  // namespace phos::bench

int main(int argc, char** argv) { return phos::bench::Main(argc, argv); }
