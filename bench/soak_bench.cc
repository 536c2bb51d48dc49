// A mixed soak (issue 12, "Load"): one phosd serves several functions (mlp of three sizes, a small
// llama) for --minutes, cold and warm, in every restore mode, at a random concurrency, from a
// fixed seed. Every answer is checked: mlp's against its CPU reference, llama's tokens against the
// warm instance's answer to the same prompt. Every --sample-seconds the load pauses, the functions
// settle back to their warm instances, and phosd's RSS, descriptors and threads are sampled; the
// series is printed, and growth from the end of the first load period (warm-up) to the last sample
// is reported.
//
//   soak_bench [--minutes 10] [--seed 12] [--sample-seconds 30] [--max-concurrency 4]
//
// Exits 1 on any wrong answer or failed request, or when descriptors or threads grew.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "phosd_harness.h"

namespace {

using phos::Result;
using phos::Status;
using phos::bench::Clock;
using phos::bench::Daemon;
using phos::bench::HttpResponse;

// Every restore mode (X-Phos-Restore-Mode); "auto" lets phosd choose, "warm" waits for a warm
// instance, "cold-boot" runs the function from its start.
const char* const kModes[] = {"auto",           "warm",    "phos",     "eager",
                              "stop-the-world", "no-pool", "no-order", "cold-boot"};

struct Function {
  std::string name;
  bool llama = false;
  int size_mib = 0;  // mlp: --size-mib
  int layers = 0;    // mlp: --layers
  int warm = 1;      // instances kept warm
  phos::mlp::Shape shape() const { return phos::mlp::ShapeForSize(static_cast<size_t>(size_mib), layers, 1); }
};

struct Sample {
  double minute = 0;
  long rss_kib = 0;
  size_t fds = 0;
  size_t threads = 0;
};

size_t EntriesIn(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

Sample Measure(pid_t pid, Clock::time_point start) {
  Sample s;
  s.minute = std::chrono::duration<double>(Clock::now() - start).count() / 60;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kib = std::stol(line.substr(6));
  }
  s.fds = EntriesIn(proc + "/fd");
  s.threads = EntriesIn(proc + "/task");
  return s;
}

class Soak {
 public:
  Soak(Daemon* d, std::string work, uint64_t seed) : d_(d), work_(std::move(work)), rng_(seed) {}

  Status Deploy(const Function& f) {
    std::vector<std::string> args = {PHOS_PHOS_FN, "--endpoint", d_->endpoint(), "deploy", f.name};
    if (f.llama) {
      const std::string dir = work_ + "/" + f.name;
      PHOS_RETURN_IF_ERROR(phos::bench::Run({"python3", PHOS_SOURCE_DIR "/scripts/make-checkpoint.py",
                                             "--size-mib", "8", "--dtype", "f32", "--vocab", "8192",
                                             "--max-position-embeddings", "64", "--seed", "11", "--out", dir})
                               .status());
      args.insert(args.end(), {PHOS_LLAMA_FUNCTION, "--instances", std::to_string(f.warm), "--max-instances",
                               "3", "--", "--model", dir});
    } else {
      args.insert(args.end(),
                  {PHOS_MLP_FUNCTION, "--instances", std::to_string(f.warm), "--max-instances", "3", "--",
                   "--size-mib", std::to_string(f.size_mib), "--layers", std::to_string(f.layers)});
    }
    PHOS_RETURN_IF_ERROR(phos::bench::Run(args).status());
    functions_.push_back(f);
    return Settled(f);
  }

  // Until `f` runs its warm instances only, all idle.
  Status Settled(const Function& f) {
    return d_->WaitInstances(
        f.name,
        [&f](const phos::bench::InstanceCounts& c) {
          return c.total() == f.warm && c.busy == 0 && c.ending == 0;
        },
        std::chrono::seconds(600), fmt::format("{} warm instance(s) of {}", f.warm, f.name));
  }

  static std::string LlamaRequest(int prompt) {
    return fmt::format(R"({{"tokens": [{}, {}, {}], "max_new_tokens": 4, "stream": false}})", prompt,
                       prompt + 1, prompt + 2);
  }

  // One request, checked; an error names what was wrong.
  Status Request(const Function& f, const std::string& mode, int input) {
    const std::string body = f.llama ? LlamaRequest(input) : fmt::format(R"({{"seed": {}}})", input);
    PHOS_ASSIGN_OR_RETURN(HttpResponse r,
                          phos::bench::Http(d_->endpoint() + "/v1/functions/" + f.name + "/invoke", body,
                                            {"X-Phos-Restore-Mode: " + mode}));
    const std::string what = fmt::format("{} {} input {}", f.name, mode, input);
    if (r.status != 200) return Status::Internal(fmt::format("{}: HTTP {}: {}", what, r.status, r.body));
    if (!f.llama)
      return phos::bench::CheckMlpReference(r.body, f.shape(), static_cast<uint64_t>(input))
          .WithContext(what);
    std::lock_guard lock(mu_);
    auto [it, first] = llama_answers_.try_emplace(input, r.body);
    if (!first && it->second != r.body) {
      return Status::Internal(
          fmt::format("{}: tokens {} differ from the warm answer {}", what, r.body, it->second));
    }
    return Status::Ok();
  }

  // The reference answers of llama come from its warm instance.
  Status LearnLlamaAnswers() {
    for (const Function& f : functions_) {
      if (!f.llama) continue;
      for (int input = 0; input < kInputs; ++input) PHOS_RETURN_IF_ERROR(Request(f, "warm", input));
    }
    return Status::Ok();
  }

  // Requests at a random concurrency until `until`; failures are counted and the first few printed.
  void Load(Clock::time_point until, int max_concurrency) {
    while (Clock::now() < until) {
      std::uniform_int_distribution<int> concurrency(1, max_concurrency);
      const int n = concurrency(rng_);
      struct Pick {
        const Function* f;
        const char* mode;
        int input;
      };
      std::vector<Pick> picks;
      for (int i = 0; i < n; ++i) {
        std::uniform_int_distribution<size_t> fn(0, functions_.size() - 1), mode(0, std::size(kModes) - 1);
        std::uniform_int_distribution<int> input(0, kInputs - 1);
        picks.push_back({&functions_[fn(rng_)], kModes[mode(rng_)], input(rng_)});
      }
      std::vector<std::thread> threads;
      for (const Pick& p : picks) {
        threads.emplace_back([this, p] {
          Status s = Request(*p.f, p.mode, p.input);
          ++requests_;
          ++by_mode_[p.mode];
          if (!s.ok() && wrong_++ < 10) std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
        });
      }
      for (std::thread& t : threads) t.join();
    }
  }

  Status Settle() {
    for (const Function& f : functions_) PHOS_RETURN_IF_ERROR(Settled(f));
    return Status::Ok();
  }

  int requests() const { return requests_; }
  int wrong() const { return wrong_; }
  std::map<std::string, int> by_mode() const {
    std::map<std::string, int> m;
    for (const auto& [mode, n] : by_mode_) m[mode] = n.load();
    return m;
  }

 private:
  static constexpr int kInputs = 8;  // distinct inputs per function

  Daemon* d_;
  std::string work_;
  std::mt19937_64 rng_;
  std::vector<Function> functions_;
  std::mutex mu_;
  std::map<int, std::string> llama_answers_;  // by prompt
  std::atomic<int> requests_{0};
  std::atomic<int> wrong_{0};
  std::map<std::string, std::atomic<int>> by_mode_ = [] {
    std::map<std::string, std::atomic<int>> m;
    for (const char* mode : kModes) m[mode];
    return m;
  }();
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"soak_bench: a mixed soak of phosd with every answer checked"};
  double minutes = 10;
  uint64_t seed = 12;
  int sample_seconds = 30;
  int max_concurrency = 4;
  app.add_option("--minutes", minutes, "How long the load runs")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "Seed of the random choices");
  app.add_option("--sample-seconds", sample_seconds, "Load between two samples")->check(CLI::PositiveNumber);
  app.add_option("--max-concurrency", max_concurrency, "Most requests at once")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);

  // A quick device unless the caller chose one: the soak is about correctness and leaks.
  setenv("PHOS_SIMGPU_PROFILE", "ci", 0);
  setenv("PHOS_SIMGPU_TIME_SCALE", "1", 0);
  Daemon d;
  if (Status s = d.Start("soak", {"--keep-alive-ms", "200"}); !s.ok()) {
    std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
    return 1;
  }
  Soak soak(&d, d.work_dir(), seed);
  const std::vector<Function> functions = {
      {.name = "mlp-4", .size_mib = 4, .layers = 2, .warm = 1},
      {.name = "mlp-16", .size_mib = 16, .layers = 4, .warm = 1},
      {.name = "mlp-64", .size_mib = 64, .layers = 4, .warm = 0},
      {.name = "llama-8", .llama = true, .warm = 1},
  };
  for (const Function& f : functions) {
    if (Status s = soak.Deploy(f); !s.ok()) {
      std::fprintf(stderr, "soak: deploy %s: %s\n", f.name.c_str(), s.ToString().c_str());
      return 1;
    }
  }
  if (Status s = soak.LearnLlamaAnswers(); !s.ok()) {
    std::fprintf(stderr, "soak: %s\n", s.ToString().c_str());
    return 1;
  }

  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::milliseconds(static_cast<long long>(minutes * 60000));
  std::vector<Sample> series;
  while (true) {
    if (Status s = soak.Settle(); !s.ok()) {
      std::fprintf(stderr, "soak: settle: %s\n", s.ToString().c_str());
      return 1;
    }
    series.push_back(Measure(d.pid(), start));
    const Sample& s = series.back();
    std::printf("minute %5.1f: rss %ld KiB, fds %zu, threads %zu, requests %d, wrong %d\n", s.minute,
                s.rss_kib, s.fds, s.threads, soak.requests(), soak.wrong());
    std::fflush(stdout);
    if (Clock::now() >= end) break;
    soak.Load(std::min(end, Clock::now() + std::chrono::seconds(sample_seconds)), max_concurrency);
  }
  // From the end of the first load period: the first requests fill the DRAM tier with snapshots,
  // the context pool and each function's sessions, which are made once.
  const Sample& first = series.size() > 2 ? series[1] : series.front();
  const Sample& last = series.back();
  std::string modes;
  for (const auto& [mode, n] : soak.by_mode()) modes += fmt::format(" {} {}", mode, n);
  std::printf("soak: %.1f minutes, %d requests (%s), %d wrong or failed\n", minutes, soak.requests(),
              modes.c_str() + 1, soak.wrong());
  std::printf("growth from minute %.1f to the last sample: rss %+ld KiB, fds %+ld, threads %+ld\n",
              first.minute, last.rss_kib - first.rss_kib,
              static_cast<long>(last.fds) - static_cast<long>(first.fds),
              static_cast<long>(last.threads) - static_cast<long>(first.threads));
  const bool grew = last.fds > first.fds || last.threads > first.threads;
  return soak.wrong() == 0 && !grew ? 0 : 1;
}
