// mlp: multi-layer perceptron inference as a phos function.
//
// Initialisation (before the pre-entry point): weights generated from --weight-seed, copied to
// the device through pinned staging, a cuBLAS handle created. Each request then runs every layer
// as a cuBLAS SGEMM plus the bias_activation kernel, and answers with the output's checksum and
// argmax (and the whole output with "full": true). Written against the CUDA runtime and cuBLAS
// APIs only: in phos those calls are executed by phosd (docs/design.md D1).
//
//   mlp [--size-mib N | --width W] [--layers L] [--batch B] [--weight-seed S]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels.cuh"
#include "mlp_model.h"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;
using phos::mlp::Shape;

class Mlp {
 public:
  Mlp(Shape shape, uint64_t weight_seed) : shape_(shape), weight_seed_(weight_seed) {}
  // Pinned host memory is the process's own: released here, or it outlives every pointer to it
  // (LeakSanitizer reported it at each instance's exit). Device memory goes with the session.
  ~Mlp() { cudaFreeHost(io_); }
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PHOS_FN_RETURN_IF_BLAS(cublasCreate(&blas_));
    PHOS_FN_RETURN_IF_BLAS(cublasSetStream(blas_, stream_));
    const size_t w = static_cast<size_t>(shape_.width);
    weights_.resize(shape_.layers);
    biases_.resize(shape_.layers);
    // Generate into pinned staging a few columns at a time, so a multi-GiB model never needs its
    // whole size in host memory.
    const size_t cols_per_chunk = std::max<size_t>(1, (16u << 20) / (w * sizeof(float)));
    // Freed on every return, an early one included (LeakSanitizer reported a failed Init's).
    struct Staging {
      float* buffers[2] = {nullptr, nullptr};
      ~Staging() {
        for (float* s : buffers) cudaFreeHost(s);
      }
    } pinned;
    float* (&staging)[2] = pinned.buffers;
    for (auto& s : staging) PHOS_FN_RETURN_IF_CUDA(cudaMallocHost(reinterpret_cast<void**>(&s), cols_per_chunk * w * sizeof(float)));
    int turn = 0;
    for (int l = 0; l < shape_.layers; ++l) {
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&weights_[l]), shape_.weight_elements() * sizeof(float)));
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&biases_[l]), w * sizeof(float)));
      for (size_t col = 0; col < w; col += cols_per_chunk, turn ^= 1) {
        size_t cols = std::min(cols_per_chunk, w - col);
        // Double buffering: the copy of one chunk overlaps the generation of the next.
        PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
        phos::mlp::GenerateWeightColumns(weight_seed_, l, shape_, col, cols, staging[turn]);
        PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(weights_[l] + col * w, staging[turn], cols * w * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_));
      }
      PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
      phos::mlp::GenerateBias(weight_seed_, l, shape_, staging[0]);
      PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(biases_[l], staging[0], w * sizeof(float), cudaMemcpyHostToDevice, stream_));
    }
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    for (auto& s : staging) {
      PHOS_FN_RETURN_IF_CUDA(cudaFreeHost(s));
      s = nullptr;
    }
    for (auto& a : activations_) {
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&a), shape_.io_elements() * sizeof(float)));
    }
    PHOS_FN_RETURN_IF_CUDA(cudaMallocHost(reinterpret_cast<void**>(&io_), shape_.io_elements() * sizeof(float)));
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view body) {
    PHOS_ASSIGN_OR_RETURN(phos::mlp::Request request, phos::mlp::ParseRequest(body, shape_));
    const size_t n = shape_.io_elements();
    std::copy(request.input.begin(), request.input.end(), io_);
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(activations_[0], io_, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    const float one = 1.0f, zero = 0.0f;
    int rows = shape_.width, cols = shape_.batch;
    int cur = 0;
    for (int l = 0; l < shape_.layers; ++l) {
      float* x = activations_[cur];
      float* y = activations_[cur ^ 1];
      PHOS_FN_RETURN_IF_BLAS(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, rows, &one, weights_[l], rows, x,
                                 rows, &zero, y, rows));
      int relu = l + 1 < shape_.layers ? 1 : 0;
      void* args[] = {&y, &biases_[l], &rows, &cols, &relu};
      unsigned blocks = static_cast<unsigned>((n + 255) / 256);
      PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&bias_activation), dim3(blocks), dim3(256),
                                      args, 0, stream_));
      cur ^= 1;
    }
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(io_, activations_[cur], n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    std::vector<float> output(io_, io_ + n);
    return phos::mlp::FormatResponse(output, shape_, request.full);
  }

 private:
  Shape shape_;
  uint64_t weight_seed_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<float*> weights_;
  std::vector<float*> biases_;
  float* activations_[2] = {nullptr, nullptr};
  float* io_ = nullptr;  // pinned: request input and response output
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlp: multi-layer perceptron inference (a phos function)"};
  size_t size_mib = 0;
  Shape shape;
  uint64_t weight_seed = 42;
  app.add_option("--size-mib", size_mib, "Model size in MiB (sets the width from --layers)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--width", shape.width, "Rows and columns of each weight matrix")->check(CLI::Range(16, 65536));
  app.add_option("--layers", shape.layers, "Number of layers")->check(CLI::Range(1, 1024));
  app.add_option("--batch", shape.batch, "Input columns per request")->check(CLI::Range(1, 4096));
  app.add_option("--weight-seed", weight_seed, "Seed of the generated weights");
  CLI11_PARSE(app, argc, argv);
  if (size_mib > 0) shape = phos::mlp::ShapeForSize(size_mib, shape.layers, shape.batch);

  Mlp mlp(shape, weight_seed);
  if (Status s = mlp.Init(); !s.ok()) {
    PHOS_LOG(Error, "mlp", "initialisation failed: {}", s.ToString());
    return 1;
  }
  PHOS_LOG(Info, "mlp", "ready: width {} x {} layers, batch {}, {} MiB of weights", shape.width, shape.layers,
           shape.batch, shape.model_bytes() >> 20);
  return phos::fn::Serve([&mlp](std::string_view request) { return mlp.Handle(request); });
}
