// fault_fn: a function that fails on request at a chosen stage of its life, for the fault tests.
//
// Initialisation (before the pre-entry point): one device buffer of --mib MiB whose byte k holds
// Pattern(k), so every restore has that many bytes to bring back. Requests:
//   "sum"             answers Fingerprint(): the buffer read back with cudaMemcpy, hashed
//   "crash:restore"   aborts at once, before touching the device (a phos restore is still loading)
//   "crash:response"  reads the buffer back, then aborts before answering
//   "crash:stream"    sends the piece "first\n", then aborts
//   "hang"            never answers
// --crash-before-entry aborts after the buffer is filled, before the entry point, saying so on
// standard error (the line phosd reports for a deploy that failed).
//
//   fault_fn [--mib N] [--crash-before-entry]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "fault_fn.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;

class FaultFn {
 public:
  Status Init(size_t bytes) {
    bytes_ = bytes;
    std::vector<unsigned char> host(bytes_);
    for (size_t k = 0; k < bytes_; ++k) host[k] = phos::fault_fn::Pattern(k);
    PHOS_RETURN_IF_ERROR(::phos::fn::CudaStatus(cudaMalloc(&device_, bytes_), "cudaMalloc"));
    return ::phos::fn::CudaStatus(cudaMemcpy(device_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }

  Result<std::string> Handle(std::string_view request, phos::fn::Pieces& out) {
    if (request == "crash:restore") std::abort();
    if (request == "crash:stream") {
      PHOS_RETURN_IF_ERROR(out.Send("first\n"));
      std::abort();
    }
    if (request == "hang") {
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (request != "sum" && request != "crash:response") {
      return Status::InvalidArgument("unknown request '" + std::string(request) + "'");
    }
    std::vector<unsigned char> host(bytes_);
    PHOS_RETURN_IF_ERROR(
        ::phos::fn::CudaStatus(cudaMemcpy(host.data(), device_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy back"));
    if (request == "crash:response") std::abort();
    return phos::fault_fn::Fingerprint(host.data(), host.size());
  }

 private:
  size_t bytes_ = 0;
  void* device_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fault_fn: fails on request at a chosen stage"};
  size_t mib = 16;
  bool crash_before_entry = false;
  app.add_option("--mib", mib, "Device buffer size in MiB")->check(CLI::Range(1, 4096));
  app.add_flag("--crash-before-entry", crash_before_entry, "Abort before the entry point");
  CLI11_PARSE(app, argc, argv);

  FaultFn fn;
  if (Status s = fn.Init(mib << 20); !s.ok()) {
    std::fprintf(stderr, "fault_fn: %s\n", s.ToString().c_str());
    return 1;
  }
  if (crash_before_entry) {
    std::fprintf(stderr, "fault_fn: crashing before the entry point as asked\n");
    std::fflush(stderr);
    std::abort();
  }
  return phos::fn::Serve(
      [&fn](std::string_view request, phos::fn::Pieces& out) { return fn.Handle(request, out); });
}
