// globals_fn: a function whose state before its pre-entry point lives partly in module globals
// and in a kernel setting, for validating snapshots of them (docs/remoting.md, "Kernels").
//
// Initialisation: weights[i] = i / 2 in a device buffer of N floats; the __constant__ table
// scales[k] = k + 1 (cudaMemcpyToSymbol); the __device__ counter requests_seen = 100; the kernel
// opted in to 64 KiB of dynamic shared memory, which every launch asks for. A request is a number
// X: one launch with launch attributes (cudaLaunchKernelExC: 64 KiB of dynamic shared memory, a
// completion event) computes out[i] = X * scales[i % 8] + weights[i] and counts the request; the
// answer is "seen S sum T first A B", S the counter afterwards, T the sum of out (each as %.1f).
//
//   globals_fn [--elements N]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels.cuh"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;

constexpr size_t kSharedBytes = 64 << 10;  // past the 48 KiB a kernel gets without opting in
const void* const kKernel = reinterpret_cast<const void*>(&scale_and_count);

class GlobalsFn {
 public:
  explicit GlobalsFn(int elements) : elements_(elements) {}

  Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PHOS_FN_RETURN_IF_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    std::vector<float> weights(static_cast<size_t>(elements_));
    for (int i = 0; i < elements_; ++i) weights[i] = static_cast<float>(i) / 2;
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&weights_), weights.size() * sizeof(float)));
    PHOS_FN_RETURN_IF_CUDA(
        cudaMemcpy(weights_, weights.data(), weights.size() * sizeof(float), cudaMemcpyHostToDevice));
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&out_), weights.size() * sizeof(float)));
    const float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyToSymbol(&scales, table, sizeof(table)));
    const unsigned seen = 100;
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyToSymbol(&requests_seen, &seen, sizeof(seen)));
    PHOS_FN_RETURN_IF_CUDA(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSharedBytes)));
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
    cudaLaunchAttribute attrs[1];
    std::memset(attrs, 0, sizeof(attrs));
    attrs[0].id = cudaLaunchAttributeLaunchCompletionEvent;
    attrs[0].val.launchCompletionEvent.event = done_;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>((elements_ + 255) / 256));
    config.blockDim = dim3(256);
    config.dynamicSmemBytes = kSharedBytes;
    config.stream = stream_;
    config.attrs = attrs;
    config.numAttrs = 1;
    const float* weights = weights_;
    float* out = out_;
    int n = elements_;
    void* args[] = {&weights, &x, &out, &n};
    PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernelExC(&config, kKernel, args));
    PHOS_FN_RETURN_IF_CUDA(cudaEventSynchronize(done_));
    std::vector<float> host(static_cast<size_t>(elements_));
    PHOS_FN_RETURN_IF_CUDA(
        cudaMemcpyAsync(host.data(), out_, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    unsigned seen = 0;
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyFromSymbol(&seen, &requests_seen, sizeof(seen)));
    // Every value is a multiple of 1/2 far below 2^24: the sum is exact in double.
    double sum = 0;
    for (float v : host) sum += v;
    char answer[128];
    std::snprintf(answer, sizeof answer, "seen %u sum %.1f first %.1f %.1f", seen, sum,
                  static_cast<double>(host[0]), static_cast<double>(host.size() > 1 ? host[1] : 0.0f));
    return std::string(answer);
  }

 private:
  const int elements_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  float* weights_ = nullptr;
  float* out_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "globals_fn: module globals and a kernel setting made before the pre-entry point (a phos test "
      "function)"};
  int elements = 4096;
  app.add_option("--elements", elements, "Floats per buffer")->check(CLI::Range(2, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  GlobalsFn fn(elements);
  if (Status s = fn.Init(); !s.ok()) {
    PHOS_LOG(Error, "globals_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
