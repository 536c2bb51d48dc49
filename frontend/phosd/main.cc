// phosd: the daemon's program. Its flags make a DaemonOptions (daemon.h: the driver table, the
// pools, the API server with gpu.sock, the snapshot store, the CPU-state backend, the instance
// manager and the HTTP API with its access policy, all in frontend/phosd's library, which the C
// API's embedded mode runs too); SIGINT/SIGTERM stop it cleanly (exit 0).
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "daemon.h"
#include "executables.h"
#include "phos/base/layout.h"
#include "phos/base/log.h"
#include "phos/base/version.h"
#include "phos/ipc/wire.h"
#include "phos/http/server.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/instance_manager.h"
#include "phos/store/store.h"

namespace {

int Fail(const phos::Status& status) {
  PHOS_LOG(Error, "phosd", "{}", status.ToString());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"phosd: the phos daemon (GPU sessions, function instances, HTTP API)"};
  app.set_version_flag("--version", fmt::format("phosd {}\nsnapshot manifest format {}, store format {}\n"
                                                "wire protocol {}\nHTTP API v1",
                                                phos::kVersion, phos::store::kManifestFormatVersion,
                                                phos::store::kStoreFormatVersion, phos::ipc::kWireVersion));
  phos::phosd::DaemonOptions o;
  o.instance_ranges = phos::runtime::ApiServerOptions{}.va_slots;
  o.collective_timeout_ms = phos::runtime::ApiServerOptions{}.collective_timeout.count();
  o.function_log_mib = phos::runtime::InstanceManagerOptions{}.max_log_bytes >> 20;
  o.kept_versions = phos::runtime::InstanceManagerOptions{}.kept_versions;
  o.max_artifact_mib = phos::phosd::ExecutablesOptions{}.max_artifact_bytes >> 20;
  o.max_body_mib = phos::http::ServerOptions{}.max_body_bytes >> 20;
  o.max_connections = phos::http::ServerOptions{}.max_connections;
  std::string log_level = "info";
  app.add_option("--listen", o.listen,
                 "HOST:PORT for the HTTP API (port 0 picks one); an address other than loopback needs "
                 "--admin-token-file")
      ->capture_default_str();
  app.add_option("--listen-unix", o.listen_unix,
                 "A Unix socket for the HTTP API as well (made with mode 0660; clients use unix:///PATH); "
                 "default: none");
  app.add_option("--admin-token-file", o.admin_token_file,
                 "File holding the admin token (mode 0600, not empty); default: <data-dir>/admin.token, made at "
                 "first start");
  app.add_option("--functions-dir", o.functions_dirs,
                 "Directory whose executables deploys may name (repeatable); default: <data-dir>/functions");
  // MiB options are bounded: shifted into bytes, a larger one would wrap.
  app.add_option("--max-artifact-mib", o.max_artifact_mib, "Largest executable POST /v1/artifacts accepts (MiB)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-body-mib", o.max_body_mib,
                 "Largest request body of every route but POST /v1/artifacts (MiB); also what one "
                 "connection's pipelined requests may hold")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-connections", o.max_connections,
                 "HTTP connections open at once; more are answered 503 (at most what the open-file limit "
                 "leaves after a reserve for phosd's own descriptors)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--kept-versions", o.kept_versions,
                 "Earlier versions of each function kept to roll back to; past it the oldest is forgotten")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--function-log-mib", o.function_log_mib,
                 "Size past which a function's log (logs/<name>-<pid>.log) is cut, its earlier part kept as "
                 "<log>.1; 0: never")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--socket-group", o.socket_group, "Group given gpu.sock (mode 0660); default: phosd's");
  app.add_option("--allow-peer-uid", o.allow_peer_uids,
                 "UID or FIRST-LAST allowed to connect to gpu.sock besides root and phosd's own (repeatable)");
  app.add_option("--data-dir", o.data_dir, "Directory for functions.json, logs/ and gpu.sock (required)");
  app.add_option("--gpu", o.gpu, "sim, cuda or auto (cuda when a driver loads)")
      ->check(CLI::IsMember({"sim", "cuda", "auto"}))
      ->capture_default_str();
  app.add_option("--invoke-timeout-ms", o.invoke_timeout_ms,
                 "Default invocation deadline (device time: on simgpu, times its time scale)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--pool-min", o.pool_min, "Contexts (each with a cuBLAS handle) kept ready to lease, per device")->capture_default_str();
  app.add_option("--pool-max", o.pool_max, "Most contexts a device's pool holds, leased or not")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--group-size", o.group_size,
                 "Devices of the device groups (contexts plus an NCCL communicator) made at start; 0: all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--group-min", o.group_min, "Device groups of each size in use kept ready")->capture_default_str();
  app.add_option("--group-max", o.group_max, "Most device groups of one size, leased or not")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dram-mib", o.dram_mib,
                 "Pinned DRAM tier for snapshots (MiB; allocated as snapshots fill it; 0: none, restores read the "
                 "store's disk)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--s3-endpoint", o.s3_endpoint,
                 "The remote snapshot tier: an S3-compatible object store (http://HOST:PORT, path-style); each "
                 "deployed snapshot is uploaded to --s3-bucket in the background; default: none");
  app.add_option("--s3-bucket", o.s3_bucket, "The remote tier's bucket (made if missing)");
  app.add_option("--s3-region", o.s3_region, "The remote tier's region, as its signatures name it")
      ->capture_default_str();
  app.add_option("--s3-credentials-file", o.s3_credentials_file,
                 "Credentials for the remote tier when AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set "
                 "(INI: [default] aws_access_key_id = ..., aws_secret_access_key = ...); default: "
                 "~/.aws/credentials");
  app.add_option("--etcd", o.etcd_endpoints,
                 "Join a cluster whose function registry is in etcd (http://HOST:PORT, several for failover; "
                 "needs --s3-endpoint, the cluster's shared snapshot tier); default: none")
      ->delimiter(',');
  app.add_option("--node-name", o.node_name, "This node's name in the cluster; default: the host's name");
  app.add_option("--advertise", o.advertise,
                 "Where the cluster's other nodes and its clients reach this node's HTTP API (http://HOST:PORT); "
                 "default: the listener's address");
  app.add_option("--node-ttl-s", o.node_ttl_s,
                 "Seconds a node that stopped answering stays listed in the cluster (its etcd lease)")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  app.add_option("--adopt-retry-ms", o.adopt_retry_ms,
                 "After an adoption of a cluster's function fails, how long its invocations get that failure "
                 "before the next try (doubled per failure in a row, at most 5 minutes)")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--instance-ranges", o.instance_ranges,
                 "Instance ranges reserved for snapshots; each deployed function takes max_instances + 1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cpu-state", o.cpu_state, "Where deployed functions' CPU state is kept: fork (a parked template) or criu")
      ->check(CLI::IsMember({"fork", "criu"}))
      ->capture_default_str();
  app.add_option("--keep-alive-ms", o.keep_alive_ms, "Idle time after which an instance beyond a function's warm count ends")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--start-timeout-ms", o.start_timeout_ms,
                 "Time an instance gets to reach its entry point (a stop-the-world restore: to be copied) before it is "
                 "ended (device time: on simgpu, times its time scale)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--collective-timeout-ms", o.collective_timeout_ms,
                 "Time one call of a function of several GPUs may wait while a collective of its is half-entered "
                 "before phosd aborts the communicator (device time; 0: only the instance's end aborts it; "
                 "docs/decisions.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--share-weights", o.share_weights,
                 "Map read-only buffers of restored instances from one allocation per device and content instead "
                 "of copying each instance's (docs/design.md D14)")
      ->capture_default_str();
  app.add_option("--sandbox", o.sandbox_mode,
                 "Run each function as its own uid in its own namespaces with its cgroup limits (docs/design.md, "
                 "Sandbox): on, off, or auto (on when this machine allows it; the log says why not)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--sandbox-ids", o.sandbox_ids,
                 "FIRST-LAST: host uids/gids of sandboxed functions; FIRST is gpu.sock's group, each function "
                 "runs as one of the others")
      ->capture_default_str();
  app.add_option("--session-device-mib", o.session_device_mib,
                 "Device memory one function instance may hold, on all its devices (MiB; 0: what the devices have)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--trusted-modules-dir", o.trusted_module_dirs,
                 "Directories of the simgpu module images (*.simgpu.so) a function may load; any other image a "
                 "function sends is refused (docs/design.md D17); default: lib/phos/modules of bin/phosd's tree");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  std::string log_subsys;
  app.add_option("--log-subsys", log_subsys,
                 "Subsystems whose lines below warn are shown: \"runtime,store\", or all but some: \"^simgpu\"; "
                 "default: all");
  // One definition per setting: its flag, its key in the --config file (the flag's long name) and
  // its variable (PHOS_ and the name in capitals, '-' as '_'). A flag wins over the variable, which
  // wins over the file: the variables are added as flags for what the command line does not set
  // (CLI11's own variables would lose to the file).
  app.set_config("--config", "",
                 "TOML file of settings, each key a flag's long name (listen = \"127.0.0.1:7070\", pool-min = 2); "
                 "PHOS_* variables (PHOS_LISTEN, PHOS_POOL_MIN, ...) and flags win over it");
  app.allow_config_extras(CLI::config_extras_mode::error);
  std::vector<std::string> args(argv, argv + argc);
  for (CLI::Option* option : app.get_options([](CLI::Option* opt) { return !opt->get_lnames().empty(); })) {
    const std::string name = option->get_lnames().front();
    if (name == "help" || name == "config") continue;
    std::string variable = "PHOS_";
    for (char c : name) variable += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const char* value = std::getenv(variable.c_str());
    const std::string flag = "--" + name;
    const bool given = std::any_of(args.begin() + 1, args.end(), [&](const std::string& a) {
      return a == flag || a.rfind(flag + "=", 0) == 0;
    });
    if (value != nullptr && !given) args.push_back(flag + "=" + value);
  }
  bool print_config = false;
  app.add_flag("--print-config", print_config,
               "Print the settings in effect (defaults, --config, PHOS_* variables and flags together) as a --config "
               "file, and exit")
      ->configurable(false);
  args.erase(args.begin());                // the program's name
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(std::move(args));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (print_config) {
    std::printf("%s", app.config_to_str(/*default_also=*/true, /*write_description=*/true).c_str());
    return 0;
  }
  // A list printed empty by --print-config reads back as one empty item: none.
  for (std::vector<std::string>* list : {&o.functions_dirs, &o.allow_peer_uids, &o.trusted_module_dirs}) {
    list->erase(std::remove(list->begin(), list->end(), std::string()), list->end());
  }
  // The build and an install put every simgpu module image of phos's own in lib/phos/modules
  // (phos/base/layout.h).
  const std::filesystem::path own_lib = phos::layout::LibDirOfExecutable();
  if (own_lib.empty()) {
    std::fprintf(stderr, "phosd: cannot find its own files: /proc/self/exe cannot be read\n");
    return 1;
  }
  if (o.trusted_module_dirs.empty()) o.trusted_module_dirs = {(own_lib / phos::layout::kModules).string()};
  o.function_library_dir = (own_lib / phos::layout::kFrontend).string();
  if (o.data_dir.empty()) {
    std::fprintf(stderr, "phosd: --data-dir is required (or data-dir in --config, or PHOS_DATA_DIR)\n");
    return 2;
  }

  phos::log::Level level;
  if (!phos::log::ParseLevel(log_level, &level)) {
    std::fprintf(stderr, "phosd: unknown --log-level '%s'\n", log_level.c_str());
    return 2;
  }
  phos::log::Configure(level, log_subsys);

  // Signals are taken by sigwait below; every thread started from here inherits the mask, and
  // writes to a dead function's channel must fail with EPIPE, not kill phosd.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = phos::phosd::Daemon::Start(std::move(o));
  if (!daemon.ok()) return Fail(daemon.status().WithContext("phosd"));

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  PHOS_LOG(Info, "phosd", "signal {}: stopping", signal_number);
  (*daemon)->Stop();
  return 0;
}
