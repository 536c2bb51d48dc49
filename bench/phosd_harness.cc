#include "phosd_harness.h"

#include <cuda.h>
#include <cstdlib>

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "phos/http/client.h"
#include "phos/http/metrics_text.h"
#include "phos/ipc/control.h"
#include "phos/store/store.h"

namespace phos::bench {
namespace {

// The admin token of every phosd this process starts (each finds it in its data directory's
// admin.token): made once, sent by Http and, through PHOS_TOKEN, by every phos-fn it runs.
const std::string& AdminToken() {
  static const std::string token = [] {
    std::string hex = phos::ipc::NewToken(32);
    setenv("PHOS_TOKEN", hex.c_str(), 1);
    return hex;
  }();
  return token;
}

}  // namespace

Result<std::string> Run(const std::vector<std::string>& args) {
  // Standard error too: what a failed command says is the error's reason.
  PHOS_ASSIGN_OR_RETURN(CommandOutput run,
                        RunCommand({.argv = args, .stderr_to_stdout = true}, std::nullopt));
  if (!run.status.success()) {
    std::string output = run.output;
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    return Status::Internal(fmt::format("{} failed ({}): {}",
                                        std::filesystem::path(args[0]).filename().string(),
                                        run.status.ToString(), output));
  }
  return std::move(run.output);
}

Result<HttpResponse> Http(const std::string& url, const std::optional<std::string>& body,
                          const std::vector<std::string>& headers) {
  // In this process (libcurl), not one curl process per request: sixteen requests at once would
  // otherwise spend a share of the two cores the restores run on starting programs.
  http::ClientRequest request{.method = body ? "POST" : "GET", .url = url, .body = body.value_or("")};
  request.headers.emplace_back("Authorization", "Bearer " + AdminToken());
  for (const std::string& h : headers) {
    size_t colon = h.find(':');
    if (colon == std::string::npos) return Status::InvalidArgument("header without ':': " + h);
    size_t value = h.find_first_not_of(' ', colon + 1);
    request.headers.emplace_back(h.substr(0, colon), value == std::string::npos ? "" : h.substr(value));
  }
  // Longer than any deadline the benchmarks give phosd, so a request phosd never answers fails
  // the run instead of hanging it.
  request.timeout_ms = 900'000;
  PHOS_ASSIGN_OR_RETURN(http::ClientResponse answer, http::Fetch(request));
  HttpResponse r{.status = answer.status, .body = std::move(answer.body)};
  for (auto& [name, value] : answer.headers) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    r.headers[lower] = std::move(value);
  }
  return r;
}

std::optional<double> StageMs(const HttpResponse& r, std::string_view stage, double time_scale) {
  auto it = r.headers.find(fmt::format("x-phos-stage-{}-us", stage));
  if (it == r.headers.end()) return std::nullopt;
  char* end = nullptr;
  double us = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str()) return std::nullopt;
  return us / 1e3 / time_scale;
}

std::map<std::string, double> AllStagesMs(const HttpResponse& r, double time_scale) {
  constexpr std::string_view kPrefix = "x-phos-stage-", kSuffix = "-us";
  std::map<std::string, double> stages;
  for (const auto& [header, value] : r.headers) {
    if (header.size() <= kPrefix.size() + kSuffix.size() || !header.starts_with(kPrefix) || !header.ends_with(kSuffix)) {
      continue;
    }
    std::string stage = header.substr(kPrefix.size(), header.size() - kPrefix.size() - kSuffix.size());
    if (std::optional<double> ms = StageMs(r, stage, time_scale)) stages[stage] = *ms;
  }
  return stages;
}

Result<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc == 0) rc = getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int err = errno;
  close(fd);
  if (rc != 0) return Status::FromErrno(err, "bind a loopback port");
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<double> MetricValue(std::string_view metrics_text, std::string_view name,
                           const std::map<std::string, std::string>& labels) {
  double total = 0;
  bool seen = false;
  for (const http::MetricSample& sample : http::ParseMetricsText(metrics_text)) {
    if (sample.name != name) continue;
    const bool match = std::all_of(labels.begin(), labels.end(), [&](const auto& want) {
      auto it = sample.labels.find(want.first);
      return it != sample.labels.end() && it->second == want.second;
    });
    if (!match) continue;
    total += sample.value;
    seen = true;
  }
  if (!seen) return Status::NotFound(fmt::format("no series of {} in /metrics", name));
  return total;
}

void Daemon::RemoveDirectories() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(data_dir_, ec);
  std::filesystem::remove_all(work_dir(), ec);
}

Status Daemon::Start(const std::string& label, const std::vector<std::string>& extra_args) {
  std::string tmpl = "/tmp/phos-" + label + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + tmpl);
  data_dir_ = tmpl;
  log_path_ = data_dir_ + "/phosd.log";
  if (std::error_code ec; !std::filesystem::create_directory(work_dir(), ec) || ec) {
    return Status::IoError("mkdir " + work_dir() + (ec ? ": " + ec.message() : ": exists"));
  }
  {
    std::ofstream token(data_dir_ + "/admin.token");
    token << AdminToken() << "\n";
    if (!token) return Status::IoError("write " + data_dir_ + "/admin.token");
  }
  std::filesystem::permissions(data_dir_ + "/admin.token", std::filesystem::perms::owner_read |
                                                               std::filesystem::perms::owner_write);
  PHOS_ASSIGN_OR_RETURN(int port, FreePort());
  endpoint_ = fmt::format("http://127.0.0.1:{}", port);
  std::vector<std::string> args = {PHOS_PHOSD, "--gpu", "sim", "--data-dir", data_dir_, "--listen",
                                   fmt::format("127.0.0.1:{}", port), "--invoke-timeout-ms", "600000",
                                   // A stop-the-world restore creates a context (62 s of wall at
                                   // scale 20) before its process may start.
                                   "--start-timeout-ms", "600000",
                                   // The functions the benchmarks deploy are built beside phosd.
                                   "--functions-dir",
                                   std::filesystem::path(PHOS_PHOSD).parent_path().string()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  SpawnOptions spawn;
  spawn.argv = std::move(args);
  spawn.stdout_file = log_path_;  // a fresh file in the fresh data directory
  spawn.stderr_to_stdout = true;
  PHOS_ASSIGN_OR_RETURN(Subprocess phosd, Subprocess::Spawn(spawn));
  phosd_.emplace(std::move(phosd));
  for (int i = 0; i < 200; ++i) {
    Result<HttpResponse> h = Http(endpoint_ + "/healthz", std::nullopt);
    if (h.ok() && h->status == 200) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status::Unavailable("phosd did not answer /healthz; see " + log_path_);
}

void Daemon::Stop() {
  if (!phosd_) return;
  // SIGTERM, and SIGKILL should it still run 10 minutes later.
  Result<ExitStatus> how = phosd_->Stop(std::chrono::minutes(10), SIGTERM);
  if (!how.ok() || !how->success()) {
    std::fprintf(stderr, "phosd did not exit cleanly: %s\n",
                 how.ok() ? how->ToString().c_str() : how.status().ToString().c_str());
  }
  phosd_.reset();
}

Result<std::string> Daemon::Metrics() {
  PHOS_ASSIGN_OR_RETURN(HttpResponse m, Http(endpoint_ + "/metrics", std::nullopt));
  if (m.status != 200) return Status::Internal(fmt::format("/metrics: HTTP {}", m.status));
  return std::move(m.body);
}

Result<int> Daemon::PoolContexts(const std::string& state) {
  PHOS_ASSIGN_OR_RETURN(std::string text, Metrics());
  PHOS_ASSIGN_OR_RETURN(double n, MetricValue(text, "phos_ctxpool_contexts", {{"state", state}}));
  return static_cast<int>(n);
}

Status Daemon::WaitPoolReady(int ready, std::chrono::seconds limit) {
  Clock::time_point deadline = Clock::now() + limit;
  Result<int> now = PoolContexts("ready");
  while ((!now.ok() || *now < ready) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    now = PoolContexts("ready");
  }
  if (!now.ok() || *now < ready) {
    return Status::Timeout(fmt::format("the context pool did not reach {} ready (last: {})", ready,
                                       now.ok() ? std::to_string(*now) : now.status().ToString()));
  }
  return Status::Ok();
}

Result<int> Daemon::WaitPoolAtRest(std::chrono::seconds limit) {
  constexpr auto kPoll = std::chrono::milliseconds(250);
  constexpr int kQuietPolls = 8;  // 2 s with nothing being created or scrubbed
  Clock::time_point deadline = Clock::now() + limit;
  int quiet = 0;
  std::string last;
  while (Clock::now() < deadline) {
    Result<std::string> text = Metrics();
    if (text.ok()) {
      Result<double> ready = MetricValue(*text, "phos_ctxpool_contexts", {{"state", "ready"}});
      Result<double> creating = MetricValue(*text, "phos_ctxpool_contexts", {{"state", "creating"}});
      Result<double> scrubbing = MetricValue(*text, "phos_ctxpool_contexts", {{"state", "scrubbing"}});
      if (ready.ok() && creating.ok() && scrubbing.ok()) {
        last = fmt::format("ready {} creating {} scrubbing {}", *ready, *creating, *scrubbing);
        quiet = *creating == 0 && *scrubbing == 0 ? quiet + 1 : 0;
        if (quiet >= kQuietPolls) return static_cast<int>(*ready);
      } else {
        last = "no phos_ctxpool_contexts by state in /metrics";
      }
    } else {
      last = text.status().ToString();
    }
    std::this_thread::sleep_for(kPoll);
  }
  return Status::Timeout("the context pool did not come to rest: " + last);
}

Result<InstanceCounts> Daemon::Instances(const std::string& function) {
  PHOS_ASSIGN_OR_RETURN(HttpResponse list, Http(endpoint_ + "/v1/functions", std::nullopt));
  nlohmann::json j = nlohmann::json::parse(list.body, nullptr, false);
  if (list.status != 200 || j.is_discarded() || !j.contains("functions") || !j["functions"].is_array()) {
    return Status::Internal(fmt::format("/v1/functions: HTTP {}: {}", list.status, list.body));
  }
  for (const auto& f : j["functions"]) {
    if (!f.is_object() || !f.contains("name") || f["name"] != function) continue;
    auto state = f.find("state");
    if (state == f.end() || !state->is_object()) {
      return Status::Internal("/v1/functions: no state for '" + function + "': " + f.dump());
    }
    // A count phosd does not report (or reports as something else) reads as none.
    auto count = [&](const char* key) {
      auto it = state->find(key);
      return it != state->end() && it->is_number_integer() ? it->get<int>() : 0;
    };
    return InstanceCounts{.starting = count("starting"),
                          .idle = count("idle"),
                          .busy = count("busy"),
                          .ending = count("ending"),
                          .queued = count("queued")};
  }
  return Status::NotFound("function '" + function + "' is not deployed");
}

Status Daemon::WaitInstances(const std::string& function,
                             const std::function<bool(const InstanceCounts&)>& settled,
                             std::chrono::seconds limit, const std::string& what) {
  Clock::time_point deadline = Clock::now() + limit;
  std::string last;
  while (Clock::now() < deadline) {
    Result<InstanceCounts> n = Instances(function);
    if (n.ok() && settled(*n)) return Status::Ok();
    last = n.ok() ? fmt::format("starting {} idle {} busy {} queued {}", n->starting, n->idle, n->busy,
                                n->queued)
                  : n.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status::Timeout(fmt::format("function '{}' did not reach {}: {}", function, what, last));
}

Status Daemon::WaitSettled(const std::string& function, std::chrono::seconds limit) {
  Clock::time_point deadline = Clock::now() + limit;
  std::string last;
  while (Clock::now() < deadline) {
    Result<InstanceCounts> n = Instances(function);
    Result<int> ready = PoolContexts("ready");
    Result<int> scrubbing = PoolContexts("scrubbing");
    if (n.ok() && ready.ok() && scrubbing.ok()) {
      last = fmt::format("starting {} idle {} busy {}; pool ready {} scrubbing {}", n->starting, n->idle,
                         n->busy, *ready, *scrubbing);
      if (n->idle == 1 && n->busy == 0 && n->starting == 0 && *ready >= 1 && *scrubbing == 0)
        return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status::Timeout("function '" + function + "' did not settle: " + last);
}

Result<SnapshotSize> ReadSnapshotSize(const std::string& data_dir, const std::string& function) {
  store::StoreOptions so;
  so.path = data_dir + "/store";
  so.read_only = true;
  PHOS_ASSIGN_OR_RETURN(auto store, store::Store::Open(so));
  PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, store->ListVersions(function));
  if (versions.empty()) return Status::NotFound("no snapshot of '" + function + "' after deploy");
  PHOS_ASSIGN_OR_RETURN(store::Manifest m, store->LoadManifest(function, versions.back()));
  SnapshotSize s;
  s.version = versions.back();
  for (const store::Buffer& b : m.buffers) {
    s.buffer_bytes += b.size;
    s.ranked += b.first_touch_rank >= 0 ? 1 : 0;
  }
  s.buffers = static_cast<int>(m.buffers.size());
  return s;
}

Status CheckMlpReference(const std::string& body, const mlp::Shape& shape, uint64_t input_seed) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("checksum") || !j["checksum"].is_number() ||
      !j.contains("argmax") || !j["argmax"].is_array() || j["argmax"].empty() ||
      !j["argmax"][0].is_number_integer()) {
    return Status::Internal("mlp answered no checksum and argmax: " + body);
  }
  std::vector<float> expected = mlp::Reference(kMlpWeightSeed, shape, mlp::InputFromSeed(input_seed, shape));
  double sum = 0;
  for (float v : expected) sum += v;
  int argmax = static_cast<int>(std::max_element(expected.begin(), expected.end()) - expected.begin());
  double got = j["checksum"].get<double>();
  if (std::abs(got - sum) > 1e-3 * (1 + std::abs(sum)) || j["argmax"][0].get<int>() != argmax) {
    return Status::Internal(fmt::format(
        "mlp's answer {} differs from the CPU reference (checksum {}, argmax {})", body, sum, argmax));
  }
  return Status::Ok();
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

Status ParsePositiveFlag(int argc, char** argv, int* i, int* out) {
  if (*i + 1 >= argc) return Status::InvalidArgument(std::string(argv[*i]) + " needs a value");
  PHOS_ASSIGN_OR_RETURN(std::vector<int> v, ParsePositiveList(argv[*i], argv[*i + 1]));
  if (v.size() != 1) return Status::InvalidArgument(fmt::format("{} takes one positive integer", argv[*i]));
  *out = v[0];
  ++*i;
  return Status::Ok();
}

double BenchTimeScale(double h2d_pinned_bps) {
  return std::max(1.0, std::round(h2d_pinned_bps / kBenchWallLinkBps));
}

Result<std::vector<int>> ParsePositiveList(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (size_t p = 0; p <= text.size();) {
    size_t comma = std::min(text.find(',', p), text.size());
    std::string item = text.substr(p, comma - p);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 1 << 20) {
      return Status::InvalidArgument(flag + ": positive integers separated by commas, not '" + text + "'");
    }
    out.push_back(static_cast<int>(v));
    p = comma + 1;
  }
  return out;
}

Result<SimDevice> OpenSimDevice() {
  setenv("PHOS_SIMGPU_PROFILE", "a100-pcie4", /*overwrite=*/0);
  if (std::getenv("PHOS_SIMGPU_TIME_SCALE") == nullptr) {
    PhosSimProfileInfo named{};
    if (phosSimGetNamedProfile(std::getenv("PHOS_SIMGPU_PROFILE"), &named) != CUDA_SUCCESS) {
      return Status::InvalidArgument(fmt::format("PHOS_SIMGPU_PROFILE='{}' names no simgpu profile",
                                                 std::getenv("PHOS_SIMGPU_PROFILE")));
    }
    setenv("PHOS_SIMGPU_TIME_SCALE", fmt::format("{:g}", BenchTimeScale(named.h2d_pinned_bps)).c_str(), 1);
  }
  if (cuInit(0) != CUDA_SUCCESS) return Status::DeviceError("simgpu cuInit failed");
  SimDevice d;
  if (phosSimGetConfig(&d.config) != CUDA_SUCCESS || phosSimGetProfile(0, &d.profile) != CUDA_SUCCESS) {
    return Status::DeviceError("cannot read simgpu's profile");
  }
  return d;
}

}  // namespace phos::bench
