// The daemon as a library: everything phosd runs — the driver table, the context and device-group
// pools, the API server (GPU sessions on <data-dir>/gpu.sock), the snapshot store with its DRAM
// tier, the CPU-state backend, the sandbox, the instance manager and the HTTP API with its access
// policy — started from one options struct and stopped in the right order. phosd's main parses
// its flags into DaemonOptions and waits for a signal; the C API's embedded mode
// (phos_runtime_open) runs the same inside the host process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "phos/base/status.h"

namespace phos::phosd {

// What phosd's flags set (phosd --help says each); the defaults are phosd's.
struct DaemonOptions {
  std::string listen = "127.0.0.1:7070";  // port 0 picks one: Daemon::endpoint() says which
  std::string data_dir;                   // required
  std::string gpu = "auto";               // sim, cuda or auto
  long long invoke_timeout_ms = 30000;
  size_t pool_min = 2;
  size_t pool_max = 8;
  size_t group_min = 1;
  size_t group_max = 2;
  int group_size = 0;
  uint64_t dram_mib = 4096;
  int instance_ranges = 0;  // 0: the API server's default
  std::string cpu_state = "fork";
  long long keep_alive_ms = 60000;
  bool share_weights = true;
  long long start_timeout_ms = 60000;
  long long collective_timeout_ms = -1;  // -1: the API server's default
  uint64_t function_log_mib = 64;
  int kept_versions = 10;
  // The remote snapshot tier (empty endpoint: none).
  std::string s3_endpoint;
  std::string s3_bucket;
  std::string s3_region = "us-east-1";
  std::string s3_credentials_file;
  // The cluster (empty etcd endpoints: none): its registry in etcd, this node's name there and the
  // endpoint the other nodes reach it at (empty: the listener's).
  std::vector<std::string> etcd_endpoints;
  std::string node_name;  // empty: the host's name
  std::string advertise;
  int64_t node_ttl_s = 10;
  int64_t adopt_retry_ms = 1000;  // the first wait after a failed adoption
  std::string admin_token_file;
  std::vector<std::string> functions_dirs;  // empty: <data-dir>/functions
  uint64_t max_artifact_mib = 256;
  uint64_t max_body_mib = 64;
  size_t max_connections = 1024;
  std::string socket_group;
  std::vector<std::string> allow_peer_uids;  // "UID" or "FIRST-LAST"
  std::string sandbox_mode = "auto";
  std::string sandbox_ids = "200000-299999";
  uint64_t session_device_mib = 0;
  std::vector<std::string> trusted_module_dirs;  // simgpu module images functions may load
  std::string simgpu_library;                    // empty: the driver table's default
  std::string listen_unix;  // a Unix socket path for the HTTP API too (mode 0660); empty: none
  std::string function_library_dir;  // phos's CUDA libraries, first in functions' LD_LIBRARY_PATH; empty: none
};

class Daemon {
 public:
  // Starts everything; fails (saying which part and why) with nothing left running.
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();  // Stop()s
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // "http://HOST:PORT", the port the server bound.
  const std::string& endpoint() const;
  const std::string& admin_token() const;
  const std::string& data_dir() const;
  // Instances first, while HTTP still answers (queued and in-flight invocations get their 503
  // instead of a dropped connection), then the server, then the rest. Idempotent.
  void Stop();

  struct Parts;

 private:
  explicit Daemon(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace phos::phosd
