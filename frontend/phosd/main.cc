// phosd: the daemon. Wires the driver table, the context and device-group pools, the API server
// (GPU sessions on <data-dir>/gpu.sock), the snapshot store (<data-dir>/store) with its DRAM tier,
// the CPU-state backend, the instance manager and the HTTP API with its access policy (the admin
// token, <data-dir>/admin.token unless --admin-token-file) together; SIGINT/SIGTERM stop it
// cleanly (exit 0).
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <prometheus/registry.h>

#include "phos/base/log.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/cuda_check.h"
#include "phos/http/server.h"
#include "phos/runtime/api_server.h"
#include "phos/driver/driver_table.h"
#include "phos/runtime/cpu_state.h"
#include "phos/runtime/instance_manager.h"
#include "phos/runtime/sandbox.h"
#include "phos/runtime/snapshot_sessions.h"
#include "phos/runtime/trusted_modules.h"
#include "phos/store/dram_tier.h"
#include "phos/store/store.h"
#include "access.h"
#include "errors.h"
#include "executables.h"
#include "routes.h"

namespace {

int Fail(const phos::Status& status) {
  PHOS_LOG(Error, "phosd", "{}", status.ToString());
  return 1;
}

// "UID" or "FIRST-LAST" (--allow-peer-uid).
phos::Result<std::pair<uid_t, uid_t>> ParseUidRange(const std::string& text) {
  auto number = [](std::string_view s, uid_t* out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  const size_t dash = text.find('-');
  uid_t first = 0;
  uid_t last = 0;
  bool ok = dash == std::string::npos
                ? number(text, &first) && number(text, &last)
                : number(std::string_view(text).substr(0, dash), &first) &&
                      number(std::string_view(text).substr(dash + 1), &last) && first <= last;
  if (!ok) return phos::Status::InvalidArgument("--allow-peer-uid '" + text + "': expected UID or FIRST-LAST");
  return std::pair<uid_t, uid_t>(first, last);
}

// HTTP connections phosd may hold open: `wanted`, raising the soft open-file limit to the hard one
// first, and lowered (logged) so that 512 descriptors stay for gpu.sock sessions, instance
// channels, logs and the store whatever HTTP clients do.
size_t ConnectionsTheFileLimitAllows(size_t wanted) {
  constexpr rlim_t kReserve = 512;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return wanted;
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) getrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur == RLIM_INFINITY || files.rlim_cur >= wanted + kReserve) return wanted;
  const size_t allowed = files.rlim_cur > 2 * kReserve ? files.rlim_cur - kReserve : files.rlim_cur / 2;
  PHOS_LOG(Warn, "phosd", "--max-connections {} lowered to {}: the open-file limit is {}", wanted, allowed,
           files.rlim_cur);
  return allowed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"phosd: the phos daemon (GPU sessions, function instances, HTTP API)"};
  std::string listen = "127.0.0.1:7070";
  std::string data_dir;
  std::string gpu = "auto";
  long long invoke_timeout_ms = 30000;
  std::string log_level = "info";
  size_t pool_min = 2;
  size_t pool_max = 8;
  size_t group_min = 1;
  size_t group_max = 2;
  int group_size = 0;
  uint64_t dram_mib = 4096;
  int instance_ranges = phos::runtime::ApiServerOptions{}.va_slots;
  std::string cpu_state = "fork";
  long long keep_alive_ms = 60000;
  bool share_weights = true;
  long long start_timeout_ms = 60000;
  long long collective_timeout_ms = phos::runtime::ApiServerOptions{}.collective_timeout.count();
  uint64_t function_log_mib = phos::runtime::InstanceManagerOptions{}.max_log_bytes >> 20;
  std::string admin_token_file;
  std::vector<std::string> functions_dirs;
  uint64_t max_artifact_mib = phos::phosd::ExecutablesOptions{}.max_artifact_bytes >> 20;
  uint64_t max_body_mib = phos::http::ServerOptions{}.max_body_bytes >> 20;
  size_t max_connections = phos::http::ServerOptions{}.max_connections;
  std::string socket_group;
  std::vector<std::string> allow_peer_uids;
  std::string sandbox_mode = "auto";
  std::string sandbox_ids = "200000-299999";
  app.add_option("--listen", listen,
                 "HOST:PORT for the HTTP API (port 0 picks one); an address other than loopback needs "
                 "--admin-token-file")
      ->capture_default_str();
  app.add_option("--admin-token-file", admin_token_file,
                 "File holding the admin token (mode 0600, not empty); default: <data-dir>/admin.token, made at "
                 "first start");
  app.add_option("--functions-dir", functions_dirs,
                 "Directory whose executables deploys may name (repeatable); default: <data-dir>/functions");
  // MiB options are bounded: shifted into bytes, a larger one would wrap.
  app.add_option("--max-artifact-mib", max_artifact_mib, "Largest executable POST /v1/artifacts accepts (MiB)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-body-mib", max_body_mib,
                 "Largest request body of every route but POST /v1/artifacts (MiB); also what one "
                 "connection's pipelined requests may hold")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-connections", max_connections,
                 "HTTP connections open at once; more are answered 503 (at most what the open-file limit "
                 "leaves after a reserve for phosd's own descriptors)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--function-log-mib", function_log_mib,
                 "Size past which a function's log (logs/<name>-<pid>.log) is cut, its earlier part kept as "
                 "<log>.1; 0: never")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--socket-group", socket_group, "Group given gpu.sock (mode 0660); default: phosd's");
  app.add_option("--allow-peer-uid", allow_peer_uids,
                 "UID or FIRST-LAST allowed to connect to gpu.sock besides root and phosd's own (repeatable)");
  app.add_option("--data-dir", data_dir, "Directory for functions.json, logs/ and gpu.sock")->required();
  app.add_option("--gpu", gpu, "sim, cuda or auto (cuda when a driver loads)")
      ->check(CLI::IsMember({"sim", "cuda", "auto"}))
      ->capture_default_str();
  app.add_option("--invoke-timeout-ms", invoke_timeout_ms,
                 "Default invocation deadline (device time: on simgpu, times its time scale)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--pool-min", pool_min, "Contexts (each with a cuBLAS handle) kept ready to lease, per device")->capture_default_str();
  app.add_option("--pool-max", pool_max, "Most contexts a device's pool holds, leased or not")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--group-size", group_size,
                 "Devices of the device groups (contexts plus an NCCL communicator) made at start; 0: all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--group-min", group_min, "Device groups of each size in use kept ready")->capture_default_str();
  app.add_option("--group-max", group_max, "Most device groups of one size, leased or not")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dram-mib", dram_mib,
                 "Pinned DRAM tier for snapshots (MiB; allocated as snapshots fill it; 0: none, restores read the "
                 "store's disk)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--instance-ranges", instance_ranges,
                 "Instance ranges reserved for snapshots; each deployed function takes max_instances + 1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cpu-state", cpu_state, "Where deployed functions' CPU state is kept: fork (a parked template) or criu")
      ->check(CLI::IsMember({"fork", "criu"}))
      ->capture_default_str();
  app.add_option("--keep-alive-ms", keep_alive_ms, "Idle time after which an instance beyond a function's warm count ends")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--start-timeout-ms", start_timeout_ms,
                 "Time an instance gets to reach its entry point (a stop-the-world restore: to be copied) before it is "
                 "ended (device time: on simgpu, times its time scale)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--collective-timeout-ms", collective_timeout_ms,
                 "Time one call of a function of several GPUs may wait while a collective of its is half-entered "
                 "before phosd aborts the communicator (device time; 0: only the instance's end aborts it; "
                 "docs/decisions.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--share-weights", share_weights,
                 "Map read-only buffers of restored instances from one allocation per device and content instead "
                 "of copying each instance's (docs/design.md D14)")
      ->capture_default_str();
  app.add_option("--sandbox", sandbox_mode,
                 "Run each function as its own uid in its own namespaces with its cgroup limits (docs/design.md, "
                 "Sandbox): on, off, or auto (on when this machine allows it; the log says why not)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--sandbox-ids", sandbox_ids,
                 "FIRST-LAST: host uids/gids of sandboxed functions; FIRST is gpu.sock's group, each function "
                 "runs as one of the others")
      ->capture_default_str();
  uint64_t session_device_mib = 0;
  app.add_option("--session-device-mib", session_device_mib,
                 "Device memory one function instance may hold, on all its devices (MiB; 0: what the devices have)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // The build puts every simgpu module image in lib/modules beside bin/ (cmake/PhosModules.cmake).
  std::vector<std::string> trusted_module_dirs = {
      (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "lib" / "modules").string()};
  app.add_option("--trusted-modules-dir", trusted_module_dirs,
                 "Directories of the simgpu module images (*.simgpu.so) a function may load; any other image a "
                 "function sends is refused (docs/design.md D17)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  phos::log::Level level;
  if (!phos::log::ParseLevel(log_level, &level)) {
    std::fprintf(stderr, "phosd: unknown --log-level '%s'\n", log_level.c_str());
    return 2;
  }
  phos::log::Configure(level, "");

  // Signals are taken by sigwait below; every thread started from here inherits the mask, and
  // writes to a dead function's channel must fail with EPIPE, not kill phosd.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return Fail(phos::Status::IoError("create data dir " + data_dir + ": " + ec.message()));
  data_dir = std::filesystem::absolute(data_dir).string();

  // Who may call what (docs/design.md, "Who may call what"): an admin API reachable from the
  // network only with a token the operator placed on purpose, not one generated unseen.
  auto host_port = phos::http::ParseHostPort(listen);
  if (!host_port.ok()) return Fail(host_port.status().WithContext("phosd: --listen"));
  if (!phos::phosd::IsLoopbackHost(host_port->first) && admin_token_file.empty()) {
    return Fail(phos::Status::InvalidArgument("phosd: --listen " + listen +
                                              " is not a loopback address: give --admin-token-file too"));
  }
  auto admin_token = admin_token_file.empty() ? phos::phosd::LoadOrCreateAdminToken(data_dir)
                                              : phos::phosd::ReadTokenFile(admin_token_file);
  if (!admin_token.ok()) return Fail(admin_token.status().WithContext("phosd: admin token"));
  const phos::phosd::AccessPolicy access(*admin_token);
  if (functions_dirs.empty()) {
    functions_dirs.push_back(data_dir + "/functions");
    std::filesystem::create_directories(functions_dirs.back(), ec);
    if (ec) return Fail(phos::Status::IoError("create " + functions_dirs.back() + ": " + ec.message()));
  }
  auto executables = phos::phosd::Executables::Open({.functions_dirs = functions_dirs,
                                                     .artifacts_dir = data_dir + "/artifacts",
                                                     .max_artifact_bytes = max_artifact_mib << 20});
  if (!executables.ok()) return Fail(executables.status().WithContext("phosd: --functions-dir"));
  gid_t gpu_socket_group = static_cast<gid_t>(-1);
  if (!socket_group.empty()) {
    const group* g = getgrnam(socket_group.c_str());
    if (g == nullptr) return Fail(phos::Status::InvalidArgument("phosd: --socket-group: no group " + socket_group));
    gpu_socket_group = g->gr_gid;
  }
  std::vector<std::pair<uid_t, uid_t>> peer_uids;
  for (const std::string& text : allow_peer_uids) {
    auto range = ParseUidRange(text);
    if (!range.ok()) return Fail(range.status());
    peer_uids.push_back(*range);
  }

  phos::driver::DriverTableOptions driver_options;
  auto kind = phos::driver::ParseGpuKind(gpu);
  if (!kind.ok()) return Fail(kind.status());
  driver_options.gpu = *kind;
  auto driver = phos::driver::DriverTable::Open(driver_options);
  if (!driver.ok()) return Fail(driver.status().WithContext("phosd"));
  if (CUresult r = (*driver)->cuInit(0); r != CUDA_SUCCESS) {
    return Fail(phos::driver::CuStatus(r, "cuInit", (*driver)->error_text()).WithContext("phosd"));
  }
  // Deadlines for work the device does are in device time: on simgpu every modelled cost takes
  // time-scale times longer in wall time, and so do they (docs/design.md D16).
  const double scale = (*driver)->time_scale();
  auto device_time = [scale](std::chrono::milliseconds ms) {
    return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(ms.count()) * scale));
  };
  PHOS_LOG(Info, "phosd", "GPU driver: {} ({}; device time scale {})", phos::driver::GpuKindName((*driver)->kind()),
           (*driver)->driver_path(), scale);

  phos::ctxpool::PoolOptions pool_options;
  pool_options.min_ready = pool_min;
  pool_options.max_contexts = pool_max;
  pool_options.lease_timeout = device_time(pool_options.lease_timeout);
  // Every component registers its metrics here; GET /metrics serves them.
  auto metrics = std::make_shared<prometheus::Registry>();
  // A pool per device: instances run on device 0 until one is moved to another (migration).
  int device_count = 1;
  if ((*driver)->cuDeviceGetCount(&device_count) != CUDA_SUCCESS || device_count < 1) device_count = 1;
  std::vector<std::unique_ptr<phos::ctxpool::ContextPool>> pools;
  for (int device = 0; device < device_count; ++device) {
    pool_options.device = device;
    auto opened = phos::ctxpool::ContextPool::Open(pool_options, *driver, metrics);
    if (!opened.ok()) return Fail(opened.status().WithContext(fmt::format("phosd: context pool of device {}", device)));
    pools.push_back(std::move(*opened));
  }
  phos::ctxpool::ContextPool* pool = pools[0].get();

  // Device groups for functions of several GPUs: made in the background (a 2-device group is ~36 s
  // on the a100 profile at time scale 10), so /healthz answers at once. Without NCCL there are
  // none and such functions' sessions are refused.
  std::unique_ptr<phos::ctxpool::CommunicatorPool> groups;
  if ((*driver)->has_nccl()) {
    auto opened = phos::ctxpool::CommunicatorPool::Open(
        {.initial_group_size = group_size,
         .min_ready = group_min,
         .max_groups = group_max,
         .lease_timeout = device_time(phos::ctxpool::CommunicatorPoolOptions{}.lease_timeout)},
        *driver, metrics);
    if (!opened.ok()) return Fail(opened.status().WithContext("phosd: communicator pool"));
    groups = std::move(*opened);
  } else {
    PHOS_LOG(Warn, "phosd", "no NCCL: functions of more than one GPU are refused");
  }

  phos::runtime::ApiServerOptions api_options;
  api_options.socket_path = data_dir + "/gpu.sock";
  api_options.socket_group = gpu_socket_group;
  api_options.allowed_peer_uids = peer_uids;
  for (const auto& p : pools) api_options.context_pools.push_back(p.get());
  api_options.device_groups = groups.get();
  api_options.share_read_only_buffers = share_weights;
  api_options.collective_timeout = device_time(std::chrono::milliseconds(collective_timeout_ms));
  api_options.va_slots = instance_ranges;
  api_options.session_limits.device_bytes = session_device_mib << 20;
  if ((*driver)->kind() == phos::driver::GpuKind::kSim) {
    auto trusted = phos::runtime::TrustedModules::FromDirectories(trusted_module_dirs);
    if (!trusted.ok()) return Fail(trusted.status().WithContext("phosd: --trusted-modules-dir"));
    api_options.trusted_modules = std::move(*trusted);
  }
  auto api = phos::runtime::ApiServer::Start(api_options, *driver);
  if (!api.ok()) return Fail(api.status().WithContext("phosd"));
  phos::runtime::SandboxOptions sandbox_options;
  sandbox_options.data_dir = data_dir;
  auto mode = phos::runtime::ParseSandboxMode(sandbox_mode);
  if (!mode.ok()) return Fail(mode.status());
  sandbox_options.mode = *mode;
  // A CRIU dump of a sandbox would take bubblewrap and its namespaces: not supported together.
  if (cpu_state == "criu" && sandbox_options.mode == phos::runtime::SandboxMode::kOn)
    return Fail(phos::Status::InvalidArgument("phosd: --sandbox on does not work with --cpu-state criu"));
  if (cpu_state == "criu" && sandbox_options.mode == phos::runtime::SandboxMode::kAuto) {
    PHOS_LOG(Warn, "phosd", "--cpu-state criu: functions are not sandboxed");
    sandbox_options.mode = phos::runtime::SandboxMode::kOff;
  }
  auto ids = phos::runtime::SandboxIds::Parse(sandbox_ids);
  if (!ids.ok()) return Fail(ids.status().WithContext("--sandbox-ids"));
  sandbox_options.ids = *ids;
  // After the API server: the sandbox gives gpu.sock its group and binds it into a trial sandbox.
  auto sandbox = phos::runtime::Sandbox::Open(sandbox_options);
  if (!sandbox.ok()) return Fail(sandbox.status().WithContext("phosd"));
  if ((*sandbox)->enabled()) {
    // Sandboxed functions reach gpu.sock through the sandbox's group and connect as their own uids.
    if (!socket_group.empty()) {
      return Fail(phos::Status::InvalidArgument(
          "phosd: --socket-group does not go with a sandbox: gpu.sock's group is the first of --sandbox-ids "
          "(--sandbox off to choose it)"));
    }
    (*api)->AllowPeerUids(ids->first, ids->last);
  }
  // Snapshots: the store, a DRAM tier made when the first snapshot needs it (its pinned arena lives
  // in a context leased for phosd's lifetime), and where deployed functions' CPU state is kept.
  phos::store::StoreOptions store_options;
  store_options.path = data_dir + "/store";
  auto store = phos::store::Store::Open(store_options);
  if (!store.ok()) return Fail(store.status().WithContext("phosd: snapshot store"));
  std::optional<phos::ctxpool::ContextLease> arena_context;
  auto make_dram = [&]() -> phos::Result<std::unique_ptr<phos::store::DramTier>> {
    PHOS_ASSIGN_OR_RETURN(phos::ctxpool::ContextLease lease, pool->Lease());
    arena_context.emplace(std::move(lease));
    PHOS_ASSIGN_OR_RETURN(auto pinned, phos::store::DriverPinnedAllocator::Create(
                                           phos::store::DriverHostMemoryOf(**driver, arena_context->context())));
    phos::store::DramTierOptions tier;
    tier.capacity_bytes = dram_mib << 20;
    tier.slot_bytes = (*store)->options().chunk_bytes;
    return phos::store::DramTier::Create(tier, std::move(pinned), store->get());
  };
  char device_name[128] = {};
  (*driver)->cuDeviceGetName(device_name, sizeof(device_name) - 1, 0);
  phos::runtime::SnapshotSessions sessions(
      api->get(), store->get(), dram_mib > 0 ? phos::runtime::SnapshotSessions::DramTierFactory(make_dram) : nullptr,
      {.device_profile = device_name,
       .capture_timeout = device_time(phos::runtime::SnapshotSessionsOptions{}.capture_timeout),
       .metrics_registry = metrics});

  std::unique_ptr<phos::runtime::CpuStateBackend> cpu_backend;
  if (cpu_state == "criu") {
    auto criu = phos::runtime::CriuBackend::Create({.images_dir = data_dir + "/criu"});
    if (!criu.ok()) return Fail(criu.status().WithContext("phosd: --cpu-state=criu"));
    if (phos::Status available = (*criu)->Available(); !available.ok()) {
      return Fail(available.WithContext("phosd: --cpu-state=criu (criu check)"));
    }
    cpu_backend = std::move(*criu);
  } else {
    auto fork = phos::runtime::ForkTemplateBackend::Create({});
    if (!fork.ok()) return Fail(fork.status().WithContext("phosd: fork templates"));
    cpu_backend = std::move(*fork);
  }

  phos::runtime::InstanceManagerOptions manager_options;
  manager_options.data_dir = data_dir;
  manager_options.invoke_timeout = device_time(std::chrono::milliseconds(invoke_timeout_ms));
  manager_options.sessions = &sessions;
  manager_options.cpu_state = cpu_backend.get();
  manager_options.sandbox = sandbox->get();
  manager_options.max_log_bytes = function_log_mib << 20;
  manager_options.keep_alive = std::chrono::milliseconds(keep_alive_ms);
  manager_options.metrics_registry = metrics;
  manager_options.start_timeout = device_time(std::chrono::milliseconds(start_timeout_ms));
  auto manager = phos::runtime::InstanceManager::Open(manager_options);
  if (!manager.ok()) return Fail(manager.status().WithContext("phosd"));

  // Moves from other nodes write chunks and commit snapshots here, off the server's loop.
  auto store_work = std::make_unique<phos::TaskThreads>(1);
  phos::http::Router router;
  phos::Status routed = phos::phosd::AddRoutes(&router, {.manager = manager->get(),
                                                         .sessions = &sessions,
                                                         .store = store->get(),
                                                         .store_work = store_work.get(),
                                                         .access = &access,
                                                         .executables = executables->get(),
                                                         .metrics = metrics});
  if (!routed.ok()) return Fail(routed);
  phos::http::ServerOptions http_options;
  http_options.listen = listen;
  http_options.max_body_bytes = max_body_mib << 20;  // POST /v1/artifacts has its own (routes.cc)
  http_options.max_connections = ConnectionsTheFileLimitAllows(max_connections);
  http_options.request_id_header = "X-Request-Id";
  http_options.error_response = [](int status, const std::string& message) {
    return phos::phosd::ErrorResponse(status, message);
  };
  auto server = phos::http::Server::Start(http_options, std::move(router));
  if (!server.ok()) return Fail(server.status().WithContext("phosd"));
  PHOS_LOG(Info, "phosd", "serving http://{} (data dir {})", listen, data_dir);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  PHOS_LOG(Info, "phosd", "signal {}: stopping", signal_number);
  // Instances first, while HTTP still answers: queued and in-flight invocations get their 503
  // ("phosd is shutting down") instead of a dropped connection. Then stop accepting.
  (*manager)->Shutdown();    // end instances and their GPU sessions
  (*server)->Stop();
  server->reset();
  store_work.reset();    // after the server, before the manager its imports adopt into
  executables->reset();  // after the server: uploads already received are still stored whole
  manager->reset();
  cpu_backend.reset();  // the parked templates
  sandbox->reset();     // the functions' cgroups
  api->reset();
  groups.reset();
  pools.clear();
  PHOS_LOG(Info, "phosd", "stopped");
  return 0;
}
