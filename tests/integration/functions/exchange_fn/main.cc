// exchange_fn: a function of 2 GPUs whose answer goes through NCCL sends and receives, for checking
// that a restore makes them wait for the buffers they read (docs/design.md D8): speculation names
// a send's buffer read and a receive's written, and nothing else points at them.
//
// Initialisation (before the pre-entry point): the device group's communicator (ncclCommInitAll),
// on each device d a data buffer of M floats, element k holding d * 100000 + k % 1000, and an inbox
// of M floats. A request is ignored; each rank sends its data buffer to the other and receives the
// other's into its inbox, in one group, and the answer is "S0 S1 F0 F1 L0 L1": each inbox's sum,
// first and last element (%.1f).
//
//   exchange_fn [--elements M]
#include <cuda_runtime.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;

constexpr int kDevices = 2;

Status Nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::DeviceError(std::string(what) + ": " + ncclGetErrorString(r));
}

#define RETURN_IF_NCCL(call) PHOS_RETURN_IF_ERROR(Nccl((call), #call))

class ExchangeFn {
 public:
  explicit ExchangeFn(size_t elements) : elements_(elements) {}

  Status Init() {
    RETURN_IF_NCCL(ncclCommInitAll(comms_, kDevices, nullptr));
    std::vector<float> values(elements_);
    for (int d = 0; d < kDevices; ++d) {
      PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(d));
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&data_[d]), elements_ * sizeof(float)));
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&inbox_[d]), elements_ * sizeof(float)));
      for (size_t k = 0; k < elements_; ++k)
        values[k] = static_cast<float>(d * 100000 + static_cast<int>(k % 1000));
      PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(data_[d], values.data(), elements_ * sizeof(float), cudaMemcpyHostToDevice));
    }
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view) {
    // Every call below names a default stream: NCCL runs each on its communicator's device, not
    // on the current one.
    PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(0));
    RETURN_IF_NCCL(ncclGroupStart());
    for (int d = 0; d < kDevices; ++d) {
      RETURN_IF_NCCL(ncclSend(data_[d], elements_, ncclFloat, 1 - d, comms_[d], nullptr));
      RETURN_IF_NCCL(ncclRecv(inbox_[d], elements_, ncclFloat, 1 - d, comms_[d], nullptr));
    }
    RETURN_IF_NCCL(ncclGroupEnd());
    double sum[kDevices] = {};
    float first[kDevices] = {}, last[kDevices] = {};
    std::vector<float> host(elements_);
    for (int d = 0; d < kDevices; ++d) {
      PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(d));
      PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(host.data(), inbox_[d], elements_ * sizeof(float), cudaMemcpyDeviceToHost));
      for (float v : host) sum[d] += v;
      first[d] = host.front();
      last[d] = host.back();
    }
    char answer[256];
    std::snprintf(answer, sizeof answer, "%.1f %.1f %.1f %.1f %.1f %.1f", sum[0], sum[1], first[0], first[1],
                  last[0], last[1]);
    return std::string(answer);
  }

 private:
  const size_t elements_;
  ncclComm_t comms_[kDevices] = {};
  float* data_[kDevices] = {};
  float* inbox_[kDevices] = {};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exchange_fn: sends and receives between 2 GPUs (a phos test function)"};
  size_t elements = 1 << 20;
  app.add_option("--elements", elements, "Floats in each device's data buffer and inbox");
  CLI11_PARSE(app, argc, argv);
  ExchangeFn fn(elements);
  if (Status s = fn.Init(); !s.ok()) {
    PHOS_LOG(Error, "exchange_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
