// What the end-to-end benchmarks share: a phosd of their own on a temporary data directory, HTTP
// through phos-http's client, /metrics and /v1/functions read back, mlp's answer checked against the CPU
// reference, the snapshot's size read from the store, and the statistics they report.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mlp_model.h"
#include "phos/base/status.h"
#include "phos/simgpu/simgpu.h"
#include "phos/base/subprocess.h"

namespace phos::bench {

using Clock = std::chrono::steady_clock;

// mlp's default --weight-seed: the weights every deployed mlp computes with.
constexpr uint64_t kMlpWeightSeed = 42;
// docs/design.md, "The bound": the bound's fixed floor, in modelled milliseconds.
constexpr double kBoundFloorMs = 5.0;
// The bound of a restore whose first response moves its bytes in `transfer_ms` (B / W) and
// computes for `compute_ms` (E): max(B / W, E) + floor, modelled ms.
inline double BoundMs(double transfer_ms, double compute_ms) {
  return std::max(transfer_ms, compute_ms) + kBoundFloorMs;
}

// Runs argv without a shell; its standard output, or an error naming the program with what it
// printed.
Result<std::string> Run(const std::vector<std::string>& args);

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// One request, through phos-http's client. Requests with a body are POSTs; `headers` are
// "Name: value" lines.
Result<HttpResponse> Http(const std::string& url, const std::optional<std::string>& body,
                          const std::vector<std::string>& headers = {});

// The stage `stage` ("lease", "first-byte", ...) of an invocation's answer, from its
// X-Phos-Stage-<Stage>-Us header, in modelled milliseconds (wall time / `time_scale`); nullopt
// when phosd did not send it.
std::optional<double> StageMs(const HttpResponse& r, std::string_view stage, double time_scale);
// Every stage the answer's X-Phos-Stage-<Stage>-Us headers name, by stage, as StageMs reads them.
std::map<std::string, double> AllStagesMs(const HttpResponse& r, double time_scale);

// A loopback port nobody listens on now (the kernel's pick for port 0).
Result<int> FreePort();

// The sum of every series of `name` in a Prometheus text exposition whose labels include all of
// `labels`; NotFound when no series matches (a metric this phosd does not export).
Result<double> MetricValue(std::string_view metrics_text, std::string_view name,
                           const std::map<std::string, std::string>& labels = {});

// A function's instances by state, as /v1/functions reports them.
struct InstanceCounts {
  int starting = 0;
  int idle = 0;
  int busy = 0;
  int ending = 0;  // asked to end, their instance range not yet scrubbed
  int queued = 0;  // requests waiting for an instance

  int total() const { return starting + idle + busy; }
};

// phosd on a temporary data directory, its log in <data>/phosd.log; stopped with SIGTERM.
class Daemon {
 public:
  ~Daemon() { Stop(); }

  // Starts phosd with `extra_args` after the common ones (simgpu, the data directory, a free
  // loopback port, and deadlines long enough for a context created from scratch at time scale
  // 20), and waits for /healthz. `label` names the data directory: /tmp/phos-<label>-XXXXXX.
  Status Start(const std::string& label, const std::vector<std::string>& extra_args);
  void Stop();

  // The /metrics text.
  Result<std::string> Metrics();
  // phos_ctxpool_contexts{...,state="<state>"}, summed over devices.
  Result<int> PoolContexts(const std::string& state);
  // Until the pool holds at least `ready` ready contexts.
  Status WaitPoolReady(int ready, std::chrono::seconds limit);
  // Until the pool has created (and scrubbed) what it set out to, whatever its target: nothing
  // creating or scrubbing for 2 s. Its ready contexts then.
  Result<int> WaitPoolAtRest(std::chrono::seconds limit);

  Result<InstanceCounts> Instances(const std::string& function);
  // Until `settled` holds for the function's instances; `what` names the state in the error.
  Status WaitInstances(const std::string& function, const std::function<bool(const InstanceCounts&)>& settled,
                       std::chrono::seconds limit, const std::string& what);
  // Until the function runs exactly one instance, idle, and the pool has a scrubbed context
  // ready: the idealized state before each request of the restore benchmark.
  Status WaitSettled(const std::string& function, std::chrono::seconds limit);

  const std::string& endpoint() const { return endpoint_; }
  const std::string& data_dir() const { return data_dir_; }
  // Where a benchmark puts files its functions read (checkpoints): <data dir>-work, beside the
  // data directory, which a sandboxed function cannot see. Made by Start.
  std::string work_dir() const { return data_dir_ + "-work"; }
  // Removes the data and work directories (phosd stopped first).
  void RemoveDirectories();
  // phosd's process id; -1 when it is not running.
  pid_t pid() const { return phosd_ ? phosd_->pid() : -1; }
  const std::string& log_path() const { return log_path_; }

 private:
  std::string data_dir_, log_path_, endpoint_;
  std::optional<Subprocess> phosd_;
};

// The latest snapshot of a deployed function, read from the store beside the running daemon.
struct SnapshotSize {
  uint64_t version = 0;
  uint64_t buffer_bytes = 0;  // B: mlp's first response reads every buffer (all its weights)
  int buffers = 0;
  int ranked = 0;  // buffers with a recorded first-touch rank
};
Result<SnapshotSize> ReadSnapshotSize(const std::string& data_dir, const std::string& function);

// mlp's answer to {"seed": <input_seed>} against the CPU reference: checksum and argmax.
Status CheckMlpReference(const std::string& body, const mlp::Shape& shape, uint64_t input_seed);

// NaN for an empty list.
double Median(std::vector<double> v);
// The nearest-rank percentile (p in (0, 100]): the smallest sample with at least p% of the
// samples at or below it, so p99 of fewer than 100 samples is their maximum. NaN for an empty list.
double Percentile(std::vector<double> v, double p);

// "256,1024" -> {256, 1024}: positive integers separated by commas; `flag` names the option in
// the error.
Result<std::vector<int>> ParsePositiveList(const std::string& flag, const std::string& text);
// The one positive integer after argv[*i] (a flag that takes one) into *out, *i moved past it.
Status ParsePositiveFlag(int argc, char** argv, int* i, int* out);

// The benchmarks' time scale, where PHOS_SIMGPU_TIME_SCALE does not set one: the scale at which the
// profile's pinned host-to-device link moves kBenchWallLinkBps of wall-clock bytes, so that every
// profile asks the same of this host (a100-pcie4: 20, h100-pcie5: 44). simgpu's copies are host
// memcpys and its kernels run at CPU speed: at one scale for all, a faster link would leave the
// host's copies and compute a larger share of each cold start, and the benchmark would measure the
// host rather than the device (docs/decisions.md, "The benchmarks' time scale follows the link").
inline constexpr double kBenchWallLinkBps = 1.25e9;
double BenchTimeScale(double h2d_pinned_bps);

// The simulated device both the benchmark and the phosd it starts run on: PHOS_SIMGPU_PROFILE
// (default a100-pcie4) and PHOS_SIMGPU_TIME_SCALE (default BenchTimeScale of the profile's link)
// set in the environment phosd inherits, simgpu initialised, its configuration and device 0's
// profile read back.
struct SimDevice {
  PhosSimConfig config{};
  PhosSimProfileInfo profile{};
};
Result<SimDevice> OpenSimDevice();

}  // namespace phos::bench
