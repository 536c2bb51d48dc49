// The C API's embedded mode: the daemon (frontend/phosd's Daemon, what phosd runs) inside the
// calling process, and clients of it through the same HTTP API the client mode speaks, so that
// every phos_* call means the same in both modes.
#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "client.h"
#include "daemon.h"
#include "phos/base/layout.h"
#include "phos/base/log.h"
#include "struct_versions.h"

struct phos_runtime {
  std::unique_ptr<phos::phosd::Daemon> daemon;
};

namespace phos::capi {
namespace {

// The directory libphos.so was loaded from: the simgpu library and module images lie in its
// phos/ directory, as the build and an install lay them out (phos/base/layout.h).
std::filesystem::path LibraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&phos_runtime_open), &info) == 0 || info.dli_fname == nullptr) return {};
  return std::filesystem::absolute(info.dli_fname).parent_path();
}

// `count` strings of the array option `name` (phos_runtime_options.<name>), none of them NULL.
phos_status CopyStrings(const char* const* items, size_t count, const char* name, std::vector<std::string>* out) {
  if (count > 0 && items == nullptr) {
    return Fail(PHOS_INVALID_ARGUMENT, std::string("phos_runtime_open: ") + name + " is NULL but its count is not 0");
  }
  for (size_t i = 0; i < count; ++i) {
    if (items[i] == nullptr) {
      return Fail(PHOS_INVALID_ARGUMENT,
                  std::string("phos_runtime_open: ") + name + "[" + std::to_string(i) + "] is NULL");
    }
    out->emplace_back(items[i]);
  }
  return PHOS_OK;
}

}  // namespace
}  // namespace phos::capi

extern "C" {

using phos::capi::CheckNotNull;
using phos::capi::CheckStructSize;
using phos::capi::Fail;
using phos::capi::Guard;

phos_status phos_runtime_open(const phos_runtime_options* options, phos_runtime** out) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(out, "phos_runtime_open: out"); s != PHOS_OK) return s;
    *out = nullptr;
    if (phos_status s = CheckNotNull(options, "phos_runtime_open: options"); s != PHOS_OK) return s;
    if (phos_status s = CheckStructSize(options->struct_size, sizeof(phos::capi::v1::RuntimeOptions),
                                        "phos_runtime_options");
        s != PHOS_OK) {
      return s;
    }
    if (options->data_dir == nullptr || *options->data_dir == '\0') {
      return Fail(PHOS_INVALID_ARGUMENT, "phos_runtime_open: data_dir is required");
    }
    phos::log::Level level = phos::log::Level::Warn;
    if (options->log_level != nullptr && !phos::log::ParseLevel(options->log_level, &level)) {
      return Fail(PHOS_INVALID_ARGUMENT, std::string("phos_runtime_open: unknown log_level '") + options->log_level +
                                             "' (trace, debug, info, warn, error or off)");
    }
    const char* subsys = std::getenv("PHOS_LOG_SUBSYS");
    phos::log::Configure(level, subsys != nullptr ? subsys : "");
    // A write to the channel of a function that died must fail with EPIPE, not end the host.
    struct sigaction pipe_action{};
    if (sigaction(SIGPIPE, nullptr, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

    phos::phosd::DaemonOptions o;
    o.data_dir = options->data_dir;
    o.gpu = options->gpu != nullptr ? options->gpu : "auto";
    o.listen = options->listen != nullptr ? options->listen : "127.0.0.1:0";
    if (options->sandbox != nullptr) o.sandbox_mode = options->sandbox;
    if (phos_status s = phos::capi::CopyStrings(options->functions_dirs, options->functions_dir_count,
                                                "functions_dirs", &o.functions_dirs);
        s != PHOS_OK) {
      return s;
    }
    const std::filesystem::path lib = phos::layout::LibDirBeside(phos::capi::LibraryDir());
    // Added after the first version: read only from a caller whose struct has them.
    const bool has_trusted = options->struct_size >= offsetof(phos_runtime_options, trusted_module_dir_count) +
                                                         sizeof(options->trusted_module_dir_count);
    if (has_trusted) {
      if (phos_status s = phos::capi::CopyStrings(options->trusted_module_dirs, options->trusted_module_dir_count,
                                                  "trusted_module_dirs", &o.trusted_module_dirs);
          s != PHOS_OK) {
        return s;
      }
    }
    if (o.trusted_module_dirs.empty()) o.trusted_module_dirs = {(lib / phos::layout::kModules).string()};
    o.function_library_dir = (lib / phos::layout::kFrontend).string();
    if (std::getenv("PHOS_SIMGPU_LIBRARY") == nullptr) o.simgpu_library = (lib / phos::layout::kSimgpuLibrary).string();
    phos::Result<std::unique_ptr<phos::phosd::Daemon>> daemon = phos::phosd::Daemon::Start(std::move(o));
    if (!daemon.ok()) {
      const phos::Status& why = daemon.status();
      phos_status status = why.code() == phos::StatusCode::kInvalidArgument ? PHOS_INVALID_ARGUMENT
                           : why.code() == phos::StatusCode::kNotFound      ? PHOS_NOT_FOUND
                                                                            : PHOS_UNAVAILABLE;
      return Fail(status, "phos_runtime_open: " + why.message());
    }
    auto runtime = std::make_unique<phos_runtime>();
    runtime->daemon = std::move(daemon).value();
    *out = runtime.release();
    return PHOS_OK;
  });
}

phos_status phos_runtime_connect(phos_runtime* runtime, phos_client** out) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(runtime, "phos_runtime_connect: runtime"); s != PHOS_OK) return s;
    return phos_connect(runtime->daemon->endpoint().c_str(), runtime->daemon->admin_token().c_str(), out);
  });
}

const char* phos_runtime_endpoint(const phos_runtime* runtime) {
  return runtime != nullptr ? runtime->daemon->endpoint().c_str() : nullptr;
}

phos_status phos_runtime_close(phos_runtime* runtime) {
  return Guard([&]() -> phos_status {
    if (runtime == nullptr) return PHOS_OK;
    runtime->daemon->Stop();
    delete runtime;
    return PHOS_OK;
  });
}

}  // extern "C"
