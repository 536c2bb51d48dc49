// graph_fn: a function that captures its CUDA graph before its pre-entry point and launches it
// per request, for validating graphs in snapshots (docs/remoting.md, "Graphs and stream capture").
//
// Initialisation: weights[i] = i / 2 in a device buffer of N floats; on a stream, a capture of
// tmp = weights (a device-to-device copy), tmp = 3 * input + tmp, a host function that counts its
// calls, out = 0 (a memset), out = 2 * tmp + out, instantiated. A request is a number X: input = X
// everywhere (a copy from the host), one launch of the graph, out read back: out[i] = 6 X + i.
// The answer is "sum T first A B captures C host H", T the sum of out, C how many captures this
// process made, H how often the host node's function ran during the request: an instance restored
// from the snapshot launches the snapshot's graph, its host node included, and answers C = 1 and
// H = 1; one whose graph were gone (cudaGraphUpload refuses it) would capture again.
//
//   graph_fn [--elements N]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <atomic>
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

const void* const kKernel = reinterpret_cast<const void*>(&graph_fn_axpy);

void CUDART_CB CountCall(void* calls) {
  ++*static_cast<std::atomic<int>*>(calls);
}

class GraphFn {
 public:
  explicit GraphFn(int elements)
      : elements_(elements), bytes_(static_cast<size_t>(elements) * sizeof(float)) {}

  Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    std::vector<float> weights(static_cast<size_t>(elements_));
    for (int i = 0; i < elements_; ++i) weights[i] = static_cast<float>(i) / 2;
    for (float** p : {&weights_, &input_, &tmp_, &out_})
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(p), bytes_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(weights_, weights.data(), bytes_, cudaMemcpyHostToDevice));
    return Capture();
  }

  Result<std::string> Handle(std::string_view body) {
    float x = 0;
    int consumed = 0;
    const std::string text(body);
    if (std::sscanf(text.c_str(), "%f%n", &x, &consumed) != 1 ||
        text.find_first_not_of(" \n", consumed) != std::string::npos) {
      return Status::InvalidArgument("request must be one number; got '" + text + "'");
    }
    // A graph the session does not know is captured again.
    if (cudaGraphUpload(exec_, stream_) != cudaSuccess) {
      cudaGetLastError();
      PHOS_RETURN_IF_ERROR(Capture());
    }
    const int calls_before = host_calls_.load();
    std::vector<float> host(static_cast<size_t>(elements_), x);
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(input_, host.data(), bytes_, cudaMemcpyHostToDevice, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaGraphLaunch(exec_, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(host.data(), out_, bytes_, cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    // Every value is a multiple of 1/2 far below 2^24: the sum is exact in double.
    double sum = 0;
    for (float v : host) sum += v;
    char answer[128];
    std::snprintf(answer, sizeof answer, "sum %.1f first %.1f %.1f captures %d host %d", sum,
                  static_cast<double>(host[0]), static_cast<double>(host[1]), captures_,
                  host_calls_.load() - calls_before);
    return std::string(answer);
  }

 private:
  Status Capture() {
    ++captures_;
    PHOS_FN_RETURN_IF_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
    const float* weights = weights_;
    const float* input = input_;
    float* tmp = tmp_;
    float* out = out_;
    float three = 3.0f, two = 2.0f;
    int n = elements_;
    const dim3 grid(static_cast<unsigned>((elements_ + 255) / 256)), block(256);
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(tmp, weights, bytes_, cudaMemcpyDeviceToDevice, stream_));
    void* first[] = {&input, &tmp, &three, &n};
    PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(kKernel, grid, block, first, 0, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaLaunchHostFunc(stream_, CountCall, &host_calls_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemsetAsync(out, 0, bytes_, stream_));
    void* second[] = {&tmp, &out, &two, &n};
    PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(kKernel, grid, block, second, 0, stream_));
    cudaGraph_t graph = nullptr;
    PHOS_FN_RETURN_IF_CUDA(cudaStreamEndCapture(stream_, &graph));
    PHOS_FN_RETURN_IF_CUDA(cudaGraphInstantiate(&exec_, graph, 0));
    PHOS_FN_RETURN_IF_CUDA(cudaGraphDestroy(graph));
    return Status::Ok();
  }

  const int elements_;
  const size_t bytes_;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  float* weights_ = nullptr;
  float* input_ = nullptr;
  float* tmp_ = nullptr;
  float* out_ = nullptr;
  int captures_ = 0;
  std::atomic<int> host_calls_{0};  // the host node's function's calls, on the host-function thread
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"graph_fn: a CUDA graph captured before the pre-entry point (a phos test function)"};
  int elements = 4096;
  app.add_option("--elements", elements, "Floats per buffer")->check(CLI::Range(2, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  GraphFn fn(elements);
  if (Status s = fn.Init(); !s.ok()) {
    PHOS_LOG(Error, "graph_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
