// etcd (Debian's etcd-server, installed by scripts/setup.sh) as a single member on loopback, for
// the tests of the cluster client. A test without it skips, saying why.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "free_port.h"
#include "phos/base/subprocess.h"
#include "phos/cluster/etcd.h"
#include "wait_until.h"

namespace phos::testing {

class EtcdServer {
 public:
  // $PHOS_ETCD, else where Debian installs it; empty when neither is there.
  static std::string Find() {
    if (const char* set = std::getenv("PHOS_ETCD"); set != nullptr && access(set, X_OK) == 0) return set;
    if (access("/usr/bin/etcd", X_OK) == 0) return "/usr/bin/etcd";
    return "";
  }

  ~EtcdServer() {
    Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts it and waits until it serves requests; empty on success, else why not (the caller
  // skips or fails).
  std::string Start() {
    const std::string program = Find();
    if (program.empty()) return "etcd is not installed (scripts/setup.sh installs etcd-server)";
    char tmpl[] = "/tmp/phos-etcd-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
    dir_ = tmpl;
    // A port taken by something else between FreeLoopbackPort and etcd's bind ends etcd at once;
    // it is started again on other ports then.
    std::string why;
    for (int attempt = 0; attempt < 3; ++attempt) {
      why = StartOnce(program, attempt);
      if (why.empty()) return "";
      Stop();
    }
    return why;
  }

  // Ends etcd (SIGTERM, then SIGKILL after 5 seconds); its data stays until the destructor.
  void Stop() {
    if (process_) (void)process_->Stop(std::chrono::seconds(5));
    process_.reset();
  }

  cluster::EtcdOptions Options() const { return cluster::EtcdOptions{.endpoints = {endpoint_}}; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string StartOnce(const std::string& program, int attempt) {
    const std::string client = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    const std::string peer = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    // A data directory of its own each time: a member that started once is bound to its peer URL.
    const std::string data = dir_ + "/data" + std::to_string(attempt);
    const std::string log = dir_ + "/etcd" + std::to_string(attempt) + ".log";
    SpawnOptions options;
    options.argv = {program, "--name", "t", "--data-dir", data,
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", "t=" + peer, "--logger", "zap", "--log-level", "error"};
    options.stdout_file = log;
    options.stderr_to_stdout = true;
    auto spawned = Subprocess::Spawn(options);
    if (!spawned.ok()) return spawned.status().ToString();
    process_.emplace(std::move(spawned).value());
    endpoint_ = client;
    Result<cluster::Etcd> made = cluster::Etcd::Make({.endpoints = {endpoint_}, .timeout_ms = 10000});
    if (!made.ok()) return made.status().ToString();
    const cluster::Etcd etcd = std::move(made).value();
    bool ended = false;
    auto up = [&](auto&& works) {
      return WaitUntil([&] {
        ended = process_->Wait(std::chrono::milliseconds(0)).ok();
        return ended || works();
      }, std::chrono::seconds(60));
    };
    // Answering first; then serving reads, which needs a leader: the member elects itself.
    const bool answered = up([&] { return etcd.Ping().ok(); }) && !ended &&
                          up([&] { return etcd.Get("phos-test-ready").ok(); });
    if (ended) return "etcd exited (" + process_->exit_status()->ToString() + "): " + Tail(log);
    if (!answered) {
      return "etcd did not come up: " + etcd.Get("phos-test-ready").status().ToString() + ": " + Tail(log);
    }
    return "";
  }

  // The end of etcd's log, for a message saying why it did not start.
  static std::string Tail(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
  }

  std::string dir_;
  std::string endpoint_;
  std::optional<Subprocess> process_;
};

}  // namespace phos::testing
