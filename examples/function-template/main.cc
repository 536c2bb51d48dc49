// hello: a phos function. It initialises once (a stream and its device buffers), then serves
// requests: {"a": 2, "b": 1, "x": [1, 2, 3]} -> {"y": [3, 5, 7]}, computed by the axpb kernel.
// Every CUDA call it makes is executed by phosd; phosd snapshots the function once Serve() waits
// for its first request, and restores that snapshot to start it again in milliseconds.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels.cuh"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

constexpr int kMaxElements = 1 << 20;

class Axpb {
 public:
  phos::Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&x_), kMaxElements * sizeof(float)));
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&y_), kMaxElements * sizeof(float)));
    return phos::Status::Ok();
  }

  phos::Result<std::string> Handle(std::string_view body) {
    // Requests come from outside: anything malformed is the caller's error (400), never a crash.
    nlohmann::json request = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!request.is_object() || !request.contains("x") || !request["x"].is_array()) {
      return phos::Status::InvalidArgument(R"(expected {"a": number, "b": number, "x": [numbers]})");
    }
    float a = 1.0f;
    float b = 0.0f;
    std::vector<float> x;
    for (const auto& [key, number] : {std::pair<const char*, float*>{"a", &a}, {"b", &b}}) {
      if (!request.contains(key)) continue;
      if (!request[key].is_number()) return phos::Status::InvalidArgument(std::string(key) + " must be a number");
      *number = request[key].get<float>();
    }
    for (const nlohmann::json& v : request["x"]) {
      if (!v.is_number()) return phos::Status::InvalidArgument("x must hold numbers only");
      x.push_back(v.get<float>());
    }
    if (x.empty() || x.size() > kMaxElements) {
      return phos::Status::InvalidArgument("x must hold 1 to " + std::to_string(kMaxElements) + " numbers");
    }

    int n = static_cast<int>(x.size());
    std::vector<float> y(x.size());
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(x_, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    void* args[] = {&y_, &x_, &a, &b, &n};
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&axpb), dim3(blocks), dim3(256), args, 0, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(y.data(), y_, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    return nlohmann::json{{"y", y}}.dump();
  }

 private:
  cudaStream_t stream_ = nullptr;
  float* x_ = nullptr;
  float* y_ = nullptr;
};

}  // namespace

int main() {
  Axpb function;
  if (phos::Status s = function.Init(); !s.ok()) {
    std::fprintf(stderr, "hello: %s\n", s.message().c_str());
    return 1;
  }
  return phos::fn::Serve([&](std::string_view request) { return function.Handle(request); });
}
