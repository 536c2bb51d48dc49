// stateful_fn: a function whose requests change its state, on the device and in the process, for
// checkpoints of running instances (docs/design.md D10).
//
// Initialisation: acc[i] = i / 2 in a device buffer of N floats; the process's count of requests
// served is 0. A request is a number X: one launch adds X * (i % 8 + 1) to acc[i], the count goes
// up by one, and the answer is "served S sum T" (T the sum of acc, as %.1f). An instance restored
// from a checkpoint answers as the checkpointed instance would have: both its count and its
// accumulator are the checkpoint's.
//
//   stateful_fn [--elements N]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels.cuh"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;

class StatefulFn {
 public:
  explicit StatefulFn(int elements) : elements_(elements) {}

  Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    std::vector<float> acc(static_cast<size_t>(elements_));
    for (int i = 0; i < elements_; ++i) acc[i] = static_cast<float>(i) / 2;
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&acc_), acc.size() * sizeof(float)));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(acc_, acc.data(), acc.size() * sizeof(float), cudaMemcpyHostToDevice));
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view body) {
    float x = 0;
    int consumed = 0;
    const std::string text(body);
    if (std::sscanf(text.c_str(), "%f%n", &x, &consumed) != 1 ||
        text.find_first_not_of(" \n", consumed) != std::string::npos) {
      return Status::InvalidArgument("request must be one number; got '" + text + "'");
    }
    float* acc = acc_;
    int n = elements_;
    void* args[] = {&acc, &x, &n};
    PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&accumulate),
                                    dim3(static_cast<unsigned>((elements_ + 255) / 256)), dim3(256), args, 0, stream_));
    std::vector<float> host(static_cast<size_t>(elements_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(host.data(), acc_, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    ++served_;
    // Requests are small integers: every value is a multiple of 1/2 far below 2^24, so the sum is
    // exact in double.
    double sum = 0;
    for (float v : host) sum += v;
    char answer[96];
    std::snprintf(answer, sizeof answer, "served %ld sum %.1f", served_, sum);
    return std::string(answer);
  }

 private:
  const int elements_;
  cudaStream_t stream_ = nullptr;
  float* acc_ = nullptr;
  long served_ = 0;  // process state: a restore from the pre-entry snapshot starts at 0
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stateful_fn: requests that change device and process state (a phos test function)"};
  int elements = 4096;
  app.add_option("--elements", elements, "Floats in the accumulator")->check(CLI::Range(8, 1 << 24));
  CLI11_PARSE(app, argc, argv);
  StatefulFn fn(elements);
  if (Status s = fn.Init(); !s.ok()) {
    PHOS_LOG(Error, "stateful_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
