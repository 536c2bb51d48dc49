#include "daemon.h"

#include <fmt/core.h>
#include <grp.h>
#include <prometheus/registry.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <filesystem>
#include <optional>

#include "access.h"
#include "cluster_node.h"
#include "errors.h"
#include "executables.h"
#include "events.h"
#include "logs.h"
#include "phos/base/log.h"
#include "phos/base/task_threads.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/cuda_check.h"
#include "phos/driver/driver_table.h"
#include "phos/http/server.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/cpu_state.h"
#include "phos/runtime/instance_manager.h"
#include "phos/runtime/sandbox.h"
#include "phos/runtime/snapshot_sessions.h"
#include "phos/runtime/trusted_modules.h"
#include "phos/store/dram_tier.h"
#include "phos/objstore/s3.h"
#include "phos/store/snapshot_uploader.h"
#include "phos/store/store.h"
#include "routes.h"
#include "simgpu_metrics.h"

namespace phos::phosd {
namespace {

// "UID" or "FIRST-LAST" (--allow-peer-uid).
Result<std::pair<uid_t, uid_t>> ParseUidRange(const std::string& text) {
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
  if (!ok) return Status::InvalidArgument("--allow-peer-uid '" + text + "': expected UID or FIRST-LAST");
  return std::pair<uid_t, uid_t>(first, last);
}

// HTTP connections the daemon may hold open: `wanted`, raising the soft open-file limit to the
// hard one first, and lowered (logged) so that 512 descriptors stay for gpu.sock sessions, instance
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

// `result`'s value into *out, or its failure with `context` (which part of the daemon it was).
template <typename T, typename U>
Status Take(Result<T> result, U* out, const std::string& context) {
  if (!result.ok()) return result.status().WithContext(context);
  *out = std::move(result).value();
  return Status::Ok();
}

}  // namespace

// Declared in the order they are made; Stop() ends them in the order they must end.
struct Daemon::Parts {
  DaemonOptions options;
  std::string endpoint;
  std::string admin_token;
  std::optional<AccessPolicy> access;
  std::unique_ptr<Executables> executables;
  std::shared_ptr<driver::DriverTable> driver;
  std::shared_ptr<prometheus::Registry> metrics = std::make_shared<prometheus::Registry>();
  std::unique_ptr<SimgpuMetrics> simgpu_metrics;  // null on a GPU
  std::vector<std::unique_ptr<ctxpool::ContextPool>> pools;
  std::unique_ptr<ctxpool::CommunicatorPool> groups;
  std::unique_ptr<runtime::ApiServer> api;
  std::unique_ptr<runtime::Sandbox> sandbox;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<store::SnapshotUploader> uploader;  // the remote tier's, after the store
  std::optional<ctxpool::ContextLease> arena_context;  // the DRAM tier's pinned arena lives in it
  std::unique_ptr<runtime::SnapshotSessions> sessions;
  std::unique_ptr<runtime::CpuStateBackend> cpu_backend;
  // Before the manager, whose threads publish to it until it is gone.
  std::unique_ptr<EventStream> events = std::make_unique<EventStream>();
  std::unique_ptr<runtime::InstanceManager> manager;
  std::unique_ptr<ClusterNode> cluster;  // the manager's deploys announced to it; it adopts into the manager
  std::optional<objstore::S3Client> bucket;  // the remote tier's
  std::unique_ptr<TaskThreads> blocking_work;  // the routes' disk work, off the server's loop
  std::unique_ptr<LogFollowers> log_followers;
  std::atomic<bool> ready{false};  // /healthz says ok: everything started, the cluster joined
  std::unique_ptr<http::Server> server;
  bool stopped = false;

  Status StartAll();
};

Status Daemon::Parts::StartAll() {
  DaemonOptions& o = options;
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  if (ec) return Status::IoError("create data dir " + o.data_dir + ": " + ec.message());
  o.data_dir = std::filesystem::absolute(o.data_dir).string();

  // Who may call what (docs/design.md, "Who may call what"): an admin API reachable from the
  // network only with a token the operator placed on purpose, not one generated unseen.
  std::pair<std::string, uint16_t> host_port;
  PHOS_RETURN_IF_ERROR(Take(http::ParseHostPort(o.listen), &host_port, "--listen"));
  if (!IsLoopbackHost(host_port.first) && o.admin_token_file.empty()) {
    return Status::InvalidArgument("--listen " + o.listen +
                                   " is not a loopback address: give --admin-token-file too");
  }
  PHOS_RETURN_IF_ERROR(Take(
      o.admin_token_file.empty() ? LoadOrCreateAdminToken(o.data_dir) : ReadTokenFile(o.admin_token_file),
      &admin_token, "admin token"));
  access.emplace(admin_token);
  if (o.functions_dirs.empty()) {
    o.functions_dirs.push_back(o.data_dir + "/functions");
    std::filesystem::create_directories(o.functions_dirs.back(), ec);
    if (ec) return Status::IoError("create " + o.functions_dirs.back() + ": " + ec.message());
  }
  PHOS_RETURN_IF_ERROR(Take(Executables::Open({.functions_dirs = o.functions_dirs,
                                               .artifacts_dir = o.data_dir + "/artifacts",
                                               .max_artifact_bytes = o.max_artifact_mib << 20}),
                            &executables, "--functions-dir"));
  gid_t gpu_socket_group = static_cast<gid_t>(-1);
  if (!o.socket_group.empty()) {
    const group* g = getgrnam(o.socket_group.c_str());
    if (g == nullptr) return Status::InvalidArgument("--socket-group: no group " + o.socket_group);
    gpu_socket_group = g->gr_gid;
  }
  std::vector<std::pair<uid_t, uid_t>> peer_uids;
  for (const std::string& text : o.allow_peer_uids) {
    PHOS_ASSIGN_OR_RETURN(auto range, ParseUidRange(text));
    peer_uids.push_back(range);
  }

  driver::DriverTableOptions driver_options;
  driver_options.simgpu_library = o.simgpu_library;
  PHOS_ASSIGN_OR_RETURN(driver_options.gpu, driver::ParseGpuKind(o.gpu));
  PHOS_ASSIGN_OR_RETURN(driver, driver::DriverTable::Open(driver_options));
  if (CUresult r = driver->cuInit(0); r != CUDA_SUCCESS)
    return driver::CuStatus(r, "cuInit", driver->error_text());
  // Deadlines for work the device does are in device time: on simgpu every modelled cost takes
  // time-scale times longer in wall time, and so do they (docs/design.md D16).
  const double scale = driver->time_scale();
  auto device_time = [scale](std::chrono::milliseconds ms) {
    return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(ms.count()) * scale));
  };
  PHOS_LOG(Info, "phosd", "GPU driver: {} ({}; device time scale {})", driver::GpuKindName(driver->kind()),
           driver->driver_path(), scale);

  ctxpool::PoolOptions pool_options;
  pool_options.min_ready = o.pool_min;
  pool_options.max_contexts = o.pool_max;
  pool_options.lease_timeout = device_time(pool_options.lease_timeout);
  // A pool per device: instances run on device 0 until one is moved to another (migration).
  int device_count = 1;
  if (driver->cuDeviceGetCount(&device_count) != CUDA_SUCCESS || device_count < 1) device_count = 1;
  for (int device = 0; device < device_count; ++device) {
    pool_options.device = device;
    std::unique_ptr<ctxpool::ContextPool> pool;
    PHOS_RETURN_IF_ERROR(Take(ctxpool::ContextPool::Open(pool_options, driver, metrics), &pool,
                              fmt::format("context pool of device {}", device)));
    pools.push_back(std::move(pool));
  }
  simgpu_metrics = SimgpuMetrics::Create(driver, device_count, *metrics);

  // Device groups for functions of several GPUs: made in the background (a 2-device group is ~36 s
  // on the a100 profile at time scale 10), so /healthz answers at once. Without NCCL there are
  // none and such functions' sessions are refused.
  if (driver->has_nccl()) {
    PHOS_RETURN_IF_ERROR(
        Take(ctxpool::CommunicatorPool::Open(
                 {.initial_group_size = o.group_size,
                  .min_ready = o.group_min,
                  .max_groups = o.group_max,
                  .lease_timeout = device_time(ctxpool::CommunicatorPoolOptions{}.lease_timeout)},
                 driver, metrics),
             &groups, "communicator pool"));
  } else {
    PHOS_LOG(Warn, "phosd", "no NCCL: functions of more than one GPU are refused");
  }

  runtime::ApiServerOptions api_options;
  api_options.socket_path = o.data_dir + "/gpu.sock";
  api_options.socket_group = gpu_socket_group;
  api_options.allowed_peer_uids = peer_uids;
  for (const auto& p : pools) api_options.context_pools.push_back(p.get());
  api_options.device_groups = groups.get();
  api_options.share_read_only_buffers = o.share_weights;
  if (o.collective_timeout_ms >= 0) {
    api_options.collective_timeout = device_time(std::chrono::milliseconds(o.collective_timeout_ms));
  } else {
    api_options.collective_timeout = device_time(api_options.collective_timeout);
  }
  if (o.instance_ranges > 0) api_options.va_slots = o.instance_ranges;
  api_options.session_limits.device_bytes = o.session_device_mib << 20;
  if (driver->kind() == driver::GpuKind::kSim) {
    PHOS_RETURN_IF_ERROR(Take(runtime::TrustedModules::FromDirectories(o.trusted_module_dirs),
                              &api_options.trusted_modules, "--trusted-modules-dir"));
  }
  PHOS_ASSIGN_OR_RETURN(api, runtime::ApiServer::Start(api_options, driver));
  runtime::SandboxOptions sandbox_options;
  sandbox_options.data_dir = o.data_dir;
  PHOS_ASSIGN_OR_RETURN(sandbox_options.mode, runtime::ParseSandboxMode(o.sandbox_mode));
  // A CRIU dump of a sandbox would take bubblewrap and its namespaces: not supported together.
  if (o.cpu_state == "criu" && sandbox_options.mode == runtime::SandboxMode::kOn) {
    return Status::InvalidArgument("--sandbox on does not work with --cpu-state criu");
  }
  if (o.cpu_state == "criu" && sandbox_options.mode == runtime::SandboxMode::kAuto) {
    PHOS_LOG(Warn, "phosd", "--cpu-state criu: functions are not sandboxed");
    sandbox_options.mode = runtime::SandboxMode::kOff;
  }
  PHOS_RETURN_IF_ERROR(
      Take(runtime::SandboxIds::Parse(o.sandbox_ids), &sandbox_options.ids, "--sandbox-ids"));
  // After the API server: the sandbox gives gpu.sock its group and binds it into a trial sandbox.
  PHOS_ASSIGN_OR_RETURN(sandbox, runtime::Sandbox::Open(sandbox_options));
  if (sandbox->enabled()) {
    // Sandboxed functions reach gpu.sock through the sandbox's group and connect as their own uids.
    if (!o.socket_group.empty()) {
      return Status::InvalidArgument(
          "--socket-group does not go with a sandbox: gpu.sock's group is the first of --sandbox-ids "
          "(--sandbox off "
          "to choose it)");
    }
    api->AllowPeerUids(sandbox_options.ids.first, sandbox_options.ids.last);
  }
  // Snapshots: the store, a DRAM tier made when the first snapshot needs it (its pinned arena lives
  // in a context leased for the daemon's lifetime), and where deployed functions' CPU state is kept.
  // This node's name: in the remote tier's keys, and the cluster's.
  std::string node_name = o.node_name;
  if (node_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node_name = host;
  }
  if (node_name.empty() || node_name.size() > 64 ||
      node_name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") !=
          std::string::npos) {
    return Status::InvalidArgument("--node-name '" + node_name + "': 1..64 letters, digits, '_', '.' or '-'");
  }
  // An empty entry is no endpoint (a printed config writes an unset list as "").
  std::erase(o.etcd_endpoints, "");
  if (!o.etcd_endpoints.empty() && o.s3_endpoint.empty()) {
    return Status::InvalidArgument("--etcd needs --s3-endpoint: the cluster's nodes share snapshots through it");
  }
  store::StoreOptions store_options;
  store_options.path = o.data_dir + "/store";
  PHOS_RETURN_IF_ERROR(Take(store::Store::Open(store_options), &store, "snapshot store"));
  if (!o.s3_endpoint.empty()) {
    if (o.s3_bucket.empty()) return Status::InvalidArgument("--s3-endpoint needs --s3-bucket");
    PHOS_ASSIGN_OR_RETURN(objstore::Credentials credentials, objstore::FindCredentials(o.s3_credentials_file));
    objstore::S3Client bucket({.endpoint = o.s3_endpoint, .bucket = o.s3_bucket, .region = o.s3_region,
                               .credentials = std::move(credentials)});
    PHOS_RETURN_IF_ERROR(bucket.CreateBucket().WithContext("the remote tier (--s3-endpoint)"));
    this->bucket = bucket;
    uploader = std::make_unique<store::SnapshotUploader>(store.get(), std::move(bucket), node_name);
    PHOS_LOG(Info, "phosd", "remote tier: bucket {} at {}", o.s3_bucket, o.s3_endpoint);
  }
  auto make_dram = [this]() -> Result<std::unique_ptr<store::DramTier>> {
    PHOS_ASSIGN_OR_RETURN(ctxpool::ContextLease lease, pools[0]->Lease());
    arena_context.emplace(std::move(lease));
    PHOS_ASSIGN_OR_RETURN(auto pinned, store::DriverPinnedAllocator::Create(
                                           store::DriverHostMemoryOf(*driver, arena_context->context())));
    store::DramTierOptions tier;
    tier.capacity_bytes = options.dram_mib << 20;
    tier.slot_bytes = store->options().chunk_bytes;
    return store::DramTier::Create(tier, std::move(pinned), store.get());
  };
  char device_name[128] = {};
  driver->cuDeviceGetName(device_name, sizeof(device_name) - 1, 0);
  sessions = std::make_unique<runtime::SnapshotSessions>(
      api.get(), store.get(),
      o.dram_mib > 0 ? runtime::SnapshotSessions::DramTierFactory(make_dram) : nullptr,
      runtime::SnapshotSessionsOptions{
          .device_profile = device_name,
          .capture_timeout = device_time(runtime::SnapshotSessionsOptions{}.capture_timeout),
          .metrics_registry = metrics});

  if (o.cpu_state == "criu") {
    std::unique_ptr<runtime::CriuBackend> criu;
    PHOS_RETURN_IF_ERROR(
        Take(runtime::CriuBackend::Create({.images_dir = o.data_dir + "/criu"}), &criu, "--cpu-state=criu"));
    PHOS_RETURN_IF_ERROR(criu->Available().WithContext("--cpu-state=criu (criu check)"));
    cpu_backend = std::move(criu);
  } else if (o.cpu_state == "fork") {
    PHOS_RETURN_IF_ERROR(Take(runtime::ForkTemplateBackend::Create({}), &cpu_backend, "fork templates"));
  } else {
    return Status::InvalidArgument("--cpu-state must be fork or criu, not '" + o.cpu_state + "'");
  }

  runtime::InstanceManagerOptions manager_options;
  manager_options.data_dir = o.data_dir;
  manager_options.invoke_timeout = device_time(std::chrono::milliseconds(o.invoke_timeout_ms));
  manager_options.sessions = sessions.get();
  manager_options.cpu_state = cpu_backend.get();
  manager_options.sandbox = sandbox.get();
  manager_options.function_library_dir = o.function_library_dir;
  manager_options.max_log_bytes = o.function_log_mib << 20;
  manager_options.kept_versions = o.kept_versions;
  manager_options.on_event = [stream = events.get()](const runtime::InstanceEvent& e) { stream->Publish(e); };
  // A deploy's snapshots go to the remote tier; in a cluster, its record to the registry after them.
  // No deploy runs before the server answers, by when the cluster node is made.
  manager_options.on_deployed = [this](const runtime::DeployedVersion& deployed) {
    if (cluster != nullptr) return cluster->Announce(deployed);
    if (uploader == nullptr) return;
    for (const runtime::DeployedVersion::Range& range : deployed.ranges) {
      if (range.snapshot != 0) uploader->Enqueue(range.store_function, range.snapshot);
    }
  };
  manager_options.keep_alive = std::chrono::milliseconds(o.keep_alive_ms);
  manager_options.metrics_registry = metrics;
  manager_options.start_timeout = device_time(std::chrono::milliseconds(o.start_timeout_ms));
  PHOS_ASSIGN_OR_RETURN(manager, runtime::InstanceManager::Open(manager_options));
  if (!o.etcd_endpoints.empty()) {
    PHOS_RETURN_IF_ERROR(Take(ClusterNode::Connect({.etcd_endpoints = o.etcd_endpoints,
                                                    .node = node_name,
                                                    .endpoint = o.advertise,
                                                    .ttl_seconds = o.node_ttl_s,
                                                    .adopt_retry = std::chrono::milliseconds(o.adopt_retry_ms),
                                                    .recorded_path = o.data_dir + "/cluster-recorded.json",
                                                    .device_profile = device_name,
                                                    .devices = api->device_count()},
                                                   manager.get(), store.get(), executables.get(), *bucket,
                                                   uploader.get()),
                              &cluster, "the cluster (--etcd)"));
  }

  blocking_work = std::make_unique<TaskThreads>(1);
  log_followers = std::make_unique<LogFollowers>();
  http::Router router;
  PHOS_RETURN_IF_ERROR(AddRoutes(&router, {.manager = manager.get(),
                                           .sessions = sessions.get(),
                                           .store = store.get(),
                                           .blocking_work = blocking_work.get(),
                                           .log_followers = log_followers.get(),
                                           .events = events.get(),
                                           .access = &*access,
                                           .executables = executables.get(),
                                           .cluster = cluster.get(),
                                           .metrics = metrics,
                                           .refresh_metrics = [simgpu = simgpu_metrics.get()] {
                                             if (simgpu != nullptr) simgpu->Refresh();
                                           },
                                           .ready = &ready}));
  http::ServerOptions http_options;
  http_options.listen = o.listen;
  http_options.unix_socket = o.listen_unix;
  http_options.max_body_bytes = o.max_body_mib << 20;  // POST /v1/artifacts has its own (routes.cc)
  http_options.max_connections = ConnectionsTheFileLimitAllows(o.max_connections);
  http_options.request_id_header = "X-Request-Id";
  http_options.error_response = [](int status, const std::string& message) {
    return ErrorResponse(status, message);
  };
  PHOS_ASSIGN_OR_RETURN(server, http::Server::Start(http_options, std::move(router)));
  const bool v6 = host_port.first.find(':') != std::string::npos;
  endpoint = fmt::format("http://{}{}{}:{}", v6 ? "[" : "", host_port.first, v6 ? "]" : "", server->port());
  if (cluster != nullptr) PHOS_RETURN_IF_ERROR(cluster->Join(endpoint).WithContext("the cluster (--etcd)"));
  ready = true;
  PHOS_LOG(Info, "phosd", "serving {} (data dir {})", endpoint, o.data_dir);
  return Status::Ok();
}

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  if (options.data_dir.empty()) return Status::InvalidArgument("the daemon needs a data directory");
  auto parts = std::make_unique<Parts>();
  parts->options = std::move(options);
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(parts)));
  if (Status started = daemon->parts_->StartAll(); !started.ok())
    return started;  // ~Daemon stops what started
  return daemon;
}

Daemon::Daemon(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

Daemon::~Daemon() {
  Stop();
}

const std::string& Daemon::endpoint() const {
  return parts_->endpoint;
}
const std::string& Daemon::admin_token() const {
  return parts_->admin_token;
}
const std::string& Daemon::data_dir() const {
  return parts_->options.data_dir;
}

void Daemon::Stop() {
  Parts& p = *parts_;
  if (p.stopped) return;
  p.stopped = true;
  // Instances first, while HTTP still answers: queued and in-flight invocations get their 503
  // ("phosd is shutting down") instead of a dropped connection. Then stop accepting.
  if (p.cluster) p.cluster->Stop();     // leaves the cluster first: the others stop sending it requests
  if (p.manager) p.manager->Shutdown();  // end instances and their GPU sessions
  // No deploy runs now: the uploads under way end (their last callbacks reach the cluster node
  // and the manager, both still there).
  p.uploader.reset();
  p.events->Close();                     // the instances' ends told, the event streams end
  if (p.server) p.server->Stop();
  p.server.reset();
  p.blocking_work.reset();     // after the server, before the manager its imports adopt into
  p.log_followers.reset();  // and the followers, which list the manager's log files
  p.executables.reset();  // after the server: uploads already received are still stored whole
  p.manager.reset();
  p.cluster.reset();  // after the manager, whose deploys' callbacks reach it until then
  p.cpu_backend.reset();  // the parked templates
  p.sessions.reset();
  p.arena_context.reset();
  p.store.reset();
  p.sandbox.reset();  // the functions' cgroups
  p.api.reset();
  p.groups.reset();
  p.pools.clear();
  p.driver.reset();
  PHOS_LOG(Info, "phosd", "stopped");
}

}  // namespace phos::phosd
