// s3rver (an S3 server in Node.js, installed by scripts/setup.sh with npm) on loopback, for the
// tests of the object store and the remote snapshot tier. A test without it skips, saying why.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "free_port.h"
#include "phos/base/subprocess.h"
#include "phos/objstore/s3.h"
#include "wait_until.h"

namespace phos::testing {

class S3rver {
 public:
  // s3rver's built-in account.
  static objstore::Credentials Account() { return {"S3RVER", "S3RVER", ""}; }

  // $PHOS_S3RVER, else where scripts/setup.sh installs it; empty when neither is there.
  static std::string Find() {
    if (const char* set = std::getenv("PHOS_S3RVER"); set != nullptr && access(set, X_OK) == 0) return set;
    if (const char* home = std::getenv("HOME"); home != nullptr) {
      const std::string path = std::string(home) + "/.cache/phos/node/node_modules/.bin/s3rver";
      if (access(path.c_str(), X_OK) == 0) return path;
    }
    return "";
  }

  ~S3rver() {
    if (process_) (void)process_->Stop(std::chrono::seconds(5));
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts it and makes `bucket`; empty on success, else why not (the caller skips or fails).
  std::string Start(const std::string& bucket) {
    const std::string program = Find();
    if (program.empty()) return "s3rver is not installed (scripts/setup.sh installs it with npm)";
    char tmpl[] = "/tmp/phos-s3rver-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
    dir_ = tmpl;
    const int port = FreeLoopbackPort();
    SpawnOptions options;
    options.argv = {program, "-d", dir_, "-a", "127.0.0.1", "-p", std::to_string(port), "--silent"};
    auto spawned = Subprocess::Spawn(options);
    if (!spawned.ok()) return spawned.status().ToString();
    process_.emplace(std::move(spawned).value());
    endpoint_ = "http://127.0.0.1:" + std::to_string(port);
    objstore::S3Client client(Options(bucket));
    // Up once it answers at all; then the bucket made.
    if (!WaitUntil([&] { return client.CreateBucket().code() != StatusCode::kUnavailable; },
                   std::chrono::seconds(60))) {
      return "s3rver did not come up: " + client.CreateBucket().ToString();
    }
    Status made = client.CreateBucket();
    return made.ok() ? "" : made.ToString();
  }

  objstore::S3Options Options(const std::string& bucket, objstore::Credentials credentials = Account()) const {
    return objstore::S3Options{.endpoint = endpoint_, .bucket = bucket, .credentials = std::move(credentials)};
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string dir_;
  std::string endpoint_;
  std::optional<Subprocess> process_;
};

}  // namespace phos::testing
